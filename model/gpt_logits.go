package model

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Logits runs the model on tokens in evaluation mode (no dropout) and returns the logits of every
// position: tokens is (B,T) row-major with T ≤ Context and ids in [0, Vocab); the result is
// (B,T,V) row-major f32 on the host (f16 logits widened under mixed precision). It holds the
// whole (B,T,V) on the device for a moment, unlike training's chunked head: for inspection,
// checks against other implementations and short prompts.
//
// It is an evaluation Forward with every target ignored, then the head over the final
// LayerNorm's output; the model's state is released before it returns.
func (m *GPT) Logits(tokens []int32, B, T int) ([]float32, error) {
	if B <= 0 || T <= 0 || len(tokens) != B*T {
		return nil, fmt.Errorf("model: GPT.Logits: %d tokens for B %d × T %d", len(tokens), B, T)
	}
	if T > m.Cfg.Context {
		return nil, fmt.Errorf("model: GPT.Logits: T = %d is longer than Context = %d", T, m.Cfg.Context)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= m.Cfg.Vocab {
			return nil, fmt.Errorf("model: GPT.Logits: token %d at position %d is outside the vocabulary of %d", id, i, m.Cfg.Vocab)
		}
	}
	dev := m.dev
	ids := dev.Alloc(tensor.I32, "logits.tokens", B, T)
	tgt := dev.Alloc(tensor.I32, "logits.targets", B, T)
	defer freeAll(dev, ids, tgt)
	dev.UploadI32(ids, tokens)
	ignore := make([]int32, B*T)
	for i := range ignore {
		ignore[i] = -1
	}
	dev.UploadI32(tgt, ignore)
	m.Forward(Inputs{Tokens: ids, Targets: tgt, Valid: 0}, false) // keeps lnf (B,T,C)
	defer m.Release()
	logits := dev.Alloc(m.Cfg.Compute, "logits", B*T, m.Cfg.Vocab)
	defer dev.Free(logits)
	LinearForward(dev, logits, m.lnf.Reshape(B*T, m.Cfg.Width), m.headW(), nil)
	return tensor.ToHost(logits), nil
}
