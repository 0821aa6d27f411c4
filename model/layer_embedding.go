package model

import "github.com/goddp/goddp/model/tensor"

// Embedding: out[b,t] = wte[ids[b,t]] + wpe[t], token embeddings plus learned positions.
type Embedding struct {
	WTE *Param // (V,C)
	WPE *Param // (maxT,C), nil without positions
	V   int
	C   int
}

// NewEmbedding registers "wte" (V,C) and, when maxT > 0, "wpe" (maxT,C), both N(0,std²), decayed.
func NewEmbedding(ps *Params, v, maxT, c int, std float32) *Embedding {
	e := &Embedding{V: v, C: c}
	e.WTE = ps.Add("wte", Init{Std: std}, true, v, c)
	if maxT > 0 {
		e.WPE = ps.Add("wpe", Init{Std: std}, true, maxT, c)
	}
	return e
}

// EmbeddingForward: out (B,T,C) = wte (V,C)[ids (B,T) i32] + wpe (maxT,C)[t] (wpe may be nil).
func EmbeddingForward(dev tensor.Device, out, ids, wte, wpe *tensor.Tensor) {
	dev.Embedding(out, ids, wte, wpe)
}

// EmbeddingBackward accumulates dout (B,T,C) into the rows of dwte (V,C) named by ids (B,T) and
// into dwpe (maxT,C) rows 0..T-1 (when not nil).
func EmbeddingBackward(dev tensor.Device, dwte, dwpe, dout, ids *tensor.Tensor) {
	dev.EmbeddingBackward(dwte, dwpe, dout, ids)
}

// Forward: out (B,T,C) from ids (B,T).
func (e *Embedding) Forward(out, ids *tensor.Tensor) {
	var wpe *tensor.Tensor
	if e.WPE != nil {
		wpe = e.WPE.Compute()
	}
	EmbeddingForward(ids.Device(), out, ids, e.WTE.Compute(), wpe)
}

// Backward accumulates the table gradients from dout (B,T,C); then they are ready. With a tied
// output projection, WTE's gradient is only final here (the embedding runs first in forward and
// last in backward), so the head must not call WTE.Ready itself.
func (e *Embedding) Backward(dout, ids *tensor.Tensor) {
	var dwpe *tensor.Tensor
	if e.WPE != nil {
		dwpe = e.WPE.G
	}
	EmbeddingBackward(ids.Device(), e.WTE.G, dwpe, dout, ids)
	if e.WPE != nil {
		e.WPE.Ready()
	}
	e.WTE.Ready()
}
