package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// Attention is causal multi-head self-attention with H heads of size hs = C/H:
//
//	qkv = x·Wqkvᵀ + bqkv                    (B,T,3C)
//	q, k, v = split(qkv)                    (B,H,T,hs) each
//	att = softmax_causal(q·kᵀ / √hs)        (B,H,T,T)
//	yh = dropout(att)·v                     (B,H,T,hs)
//	y = permute(yh)                         (B,T,C)   heads side by side
//	out = y·Wprojᵀ + bproj                  (B,T,C)
//
// Backward runs the same steps in reverse. Saved for it: q, k, v, att (after softmax, before
// dropout: the dropped copy is regenerated from the seed) and y, the projection's input. The
// pre-softmax scores, qkv and yh are freed in forward as soon as they are used.
//
// The fused path (Device.FlashAttention) goes from qkv to y in one step without the T×T scores;
// it saves qkv, y and one f32 log-sum-exp per row instead of q, k, v and att. It has no attention
// dropout, so it runs only where p is 0. Mode picks the path; AttnAuto takes the fused one where
// the device has a fast kernel for it (FlashAttentionFast).
type Attention struct {
	QKV   *Linear // (3C,C)
	Proj  *Linear // (C,C)
	Heads int
	C     int
	P     float32 // dropout on the attention probabilities
	Tag   string  // prefix of activation tags, e.g. "h.3.attn"
	Mode  AttentionMode
}

// AttentionMode chooses how attention is computed.
type AttentionMode int

const (
	AttnAuto         AttentionMode = iota // fused where the device is fast at it and p is 0
	AttnFlash                             // fused whenever p is 0 (the CPU's reference kernel included)
	AttnMaterialized                      // scores through BatchedMatMul and Softmax
)

// ParseAttentionMode reads "auto" (or ""), "flash" or "materialized".
func ParseAttentionMode(s string) (AttentionMode, error) {
	switch s {
	case "", "auto":
		return AttnAuto, nil
	case "flash":
		return AttnFlash, nil
	case "materialized", "materialised":
		return AttnMaterialized, nil
	}
	return 0, fmt.Errorf("model: attention %q: want auto, flash or materialized", s)
}

func (m AttentionMode) String() string {
	return [...]string{"auto", "flash", "materialized"}[m]
}

// fused reports whether a forward with dropout p on dev takes the fused path.
func (a *Attention) fused(dev tensor.Device, p float32, dt tensor.DType) bool {
	if p > 0 {
		return false
	}
	switch a.Mode {
	case AttnFlash:
		return true
	case AttnAuto:
		return dev.FlashAttentionFast(a.C/a.Heads, dt)
	}
	return false
}

// AttentionActs are what Attention.Backward needs from the forward.
type AttentionActs struct {
	Q, K, V *tensor.Tensor // (B,H,T,hs)
	Att     *tensor.Tensor // (B,H,T,T) softmax output
	Y       *tensor.Tensor // (B,T,C) merged heads, input of Proj
	P       float32        // dropout probability used (0 in evaluation)
	Seed    uint64         // attention dropout seed
	// fused path: Q, K, V and Att stay nil
	QKV *tensor.Tensor // (B,T,3C)
	LSE *tensor.Tensor // (B,H,T) f32
}

// NewAttention registers name+".qkv" and name+".proj". projStd is the residual projection's std
// (GPT-2: 0.02/√(2·layers)).
func NewAttention(ps *Params, name string, c, heads int, std, projStd, p float32) *Attention {
	return &Attention{
		QKV:   NewLinear(ps, name+".qkv", c, 3*c, std, true),
		Proj:  NewLinear(ps, name+".proj", c, c, projStd, true),
		Heads: heads, C: c, P: p, Tag: name,
	}
}

func (a *Attention) scale() float32 { return float32(1 / math.Sqrt(float64(a.C/a.Heads))) }

// Forward: out (B,T,C) from x (B,T,C). The returned acts hold device memory until Backward or Free.
// p (a.P in training, 0 in evaluation) and seed drive attention dropout.
func (a *Attention) Forward(out, x *tensor.Tensor, p float32, seed uint64) *AttentionActs {
	return a.forward(out, x, p, seed, true)
}

// forward is Forward; with bias false the projection's bias is left out of out, for the caller
// to fold into the residual add (Block.forward, tensor.BiasFolder).
func (a *Attention) forward(out, x *tensor.Tensor, p float32, seed uint64, bias bool) *AttentionActs {
	dev := x.Device()
	B, T, C := x.Dim(0), x.Dim(1), x.Dim(2)
	H, hs := a.Heads, C/a.Heads
	dt := out.DType()
	s := &AttentionActs{P: p, Seed: seed}

	qkv := dev.Alloc(dt, a.Tag+".qkv", B, T, 3*C)
	a.QKV.Forward(qkv, x)
	if a.fused(dev, p, dt) {
		s.QKV = qkv
		s.LSE = dev.Alloc(tensor.F32, a.Tag+".lse", B, H, T)
		s.Y = dev.Alloc(dt, a.Tag+".y", B, T, C)
		dev.FlashAttention(s.Y, s.LSE, qkv, H, a.scale())
		a.project(out, s.Y, bias)
		return s
	}
	s.Q = dev.Alloc(dt, a.Tag+".q", B, H, T, hs)
	s.K = dev.Alloc(dt, a.Tag+".k", B, H, T, hs)
	s.V = dev.Alloc(dt, a.Tag+".v", B, H, T, hs)
	dev.SplitQKV(s.Q, s.K, s.V, qkv)
	dev.Free(qkv)

	pre := dev.Alloc(dt, a.Tag+".preatt", B*H, T, T)
	dev.BatchedMatMul(pre, s.Q.Reshape(B*H, T, hs), s.K.Reshape(B*H, T, hs), false, true, 1, 0)
	s.Att = dev.Alloc(dt, a.Tag+".att", B, H, T, T)
	dev.Softmax(s.Att, pre, a.scale(), true)
	dev.Free(pre)

	attd := s.Att
	if p > 0 {
		attd = dev.Alloc(dt, a.Tag+".att.drop", B, H, T, T)
		dev.Dropout(attd, s.Att, p, seed)
	}
	yh := dev.Alloc(dt, a.Tag+".yh", B, H, T, hs)
	dev.BatchedMatMul(yh.Reshape(B*H, T, hs), attd.Reshape(B*H, T, T), s.V.Reshape(B*H, T, hs), false, false, 1, 0)
	if attd != s.Att {
		dev.Free(attd)
	}
	s.Y = dev.Alloc(dt, a.Tag+".y", B, T, C)
	dev.Permute0213(s.Y.Reshape(B, T, H, hs), yh)
	dev.Free(yh)

	a.project(out, s.Y, bias)
	return s
}

// project is the output projection out = y·Wᵀ (+ b when bias).
func (a *Attention) project(out, y *tensor.Tensor, bias bool) {
	if bias {
		a.Proj.Forward(out, y)
	} else {
		a.Proj.product(out, y)
	}
}

// forwardKept redoes a fused forward whose y and lse were kept (a checkpointed block's recompute
// with KeepAttn): qkv, which the backward reads, and the projection into out (its bias left out
// unless bias, as forward's). kept's tensors become the returned acts'.
func (a *Attention) forwardKept(out, x *tensor.Tensor, kept *AttentionActs, bias bool) *AttentionActs {
	dev := x.Device()
	B, T, C := x.Dim(0), x.Dim(1), x.Dim(2)
	s := &AttentionActs{P: kept.P, Seed: kept.Seed, Y: kept.Y, LSE: kept.LSE}
	s.QKV = dev.Alloc(out.DType(), a.Tag+".qkv", B, T, 3*C)
	a.QKV.Forward(s.QKV, x)
	a.project(out, s.Y, bias)
	return s
}

// Backward: dx (B,T,C) (overwritten) from dout (B,T,C), the forward input x and acts, which it
// frees. Proj's and QKV's parameters become ready in that order.
func (a *Attention) Backward(dx, dout, x *tensor.Tensor, s *AttentionActs) {
	dev := x.Device()
	B, T, C := x.Dim(0), x.Dim(1), x.Dim(2)
	H, hs := a.Heads, C/a.Heads
	dt := dout.DType()

	dy := dev.Alloc(dt, a.Tag+".dy", B, T, C)
	a.Proj.Backward(dy, dout, s.Y)
	if s.QKV != nil {
		dqkv := dev.Alloc(dt, a.Tag+".dqkv", B, T, 3*C)
		dev.FlashAttentionBackward(dqkv, dy, s.QKV, s.Y, s.LSE, H, a.scale())
		freeAll(dev, dy, s.Y, s.QKV, s.LSE)
		a.QKV.Backward(dx, dqkv, x)
		dev.Free(dqkv)
		return
	}
	dev.Free(s.Y)
	dyh := dev.Alloc(dt, a.Tag+".dyh", B, H, T, hs)
	dev.Permute0213(dyh, dy.Reshape(B, T, H, hs))
	dev.Free(dy)

	// yh = attd·v: datt = dyh·vᵀ, dv = attdᵀ·dyh.
	attd := s.Att
	if s.P > 0 {
		attd = dev.Alloc(dt, a.Tag+".att.drop", B, H, T, T)
		dev.Dropout(attd, s.Att, s.P, s.Seed)
	}
	dattd := dev.Alloc(dt, a.Tag+".datt", B, H, T, T)
	dev.BatchedMatMul(dattd.Reshape(B*H, T, T), dyh.Reshape(B*H, T, hs), s.V.Reshape(B*H, T, hs), false, true, 1, 0)
	dv := dev.Alloc(dt, a.Tag+".dv", B, H, T, hs)
	dev.BatchedMatMul(dv.Reshape(B*H, T, hs), attd.Reshape(B*H, T, T), dyh.Reshape(B*H, T, hs), true, false, 1, 0)
	dev.Free(dyh)
	if attd != s.Att {
		dev.Free(attd)
	}
	datt := dattd
	if s.P > 0 {
		datt = dev.Alloc(dt, a.Tag+".datt", B, H, T, T)
		dev.DropoutBackward(datt, dattd, s.P, s.Seed)
		dev.Free(dattd)
	}

	// att = softmax(scale·pre): dpre in place of datt.
	dev.SoftmaxBackward(datt, datt, s.Att, a.scale())
	dev.Free(s.Att)

	// pre = q·kᵀ: dq = dpre·k, dk = dpreᵀ·q.
	dq := dev.Alloc(dt, a.Tag+".dq", B, H, T, hs)
	dk := dev.Alloc(dt, a.Tag+".dk", B, H, T, hs)
	dev.BatchedMatMul(dq.Reshape(B*H, T, hs), datt.Reshape(B*H, T, T), s.K.Reshape(B*H, T, hs), false, false, 1, 0)
	dev.BatchedMatMul(dk.Reshape(B*H, T, hs), datt.Reshape(B*H, T, T), s.Q.Reshape(B*H, T, hs), true, false, 1, 0)
	dev.Free(datt)
	dev.Free(s.Q)
	dev.Free(s.K)
	dev.Free(s.V)

	dqkv := dev.Alloc(dt, a.Tag+".dqkv", B, T, 3*C)
	dev.MergeQKV(dqkv, dq, dk, dv)
	dev.Free(dq)
	dev.Free(dk)
	dev.Free(dv)
	a.QKV.Backward(dx, dqkv, x)
	dev.Free(dqkv)
}

// Free releases acts without a backward (evaluation, or a checkpointed block's forward).
func (s *AttentionActs) Free(dev tensor.Device) {
	for _, t := range []*tensor.Tensor{s.Q, s.K, s.V, s.Att, s.Y, s.QKV, s.LSE} {
		if t != nil {
			dev.Free(t)
		}
	}
	*s = AttentionActs{}
}
