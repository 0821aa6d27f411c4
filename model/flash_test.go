package model

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The fused attention path (the CPU's reference FlashAttention) gives the materialised path's
// output, input gradient and parameter gradients: to f32 rounding in f32, to f16 rounding in f16.
func TestFlashAttention_matchesMaterialized(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for _, sh := range [][4]int{{1, 1, 8, 1}, {2, 37, 24, 3}, {3, 70, 32, 2}} {
			B, T, C, H := sh[0], sh[1], sh[2], sh[3]
			name := fmt.Sprintf("%s/B%d.T%d.C%d.H%d", dt, B, T, C, H)
			rng := rand.New(rand.NewSource(int64(T)))
			dev := cpu.New()
			ps := NewParams(dev)
			at := NewAttention(ps, "attn", C, H, 0.3, 0.3, 0)
			ps.Build(dt)
			ps.Init(3)
			dev.RandNormal(at.QKV.B.W, 0.2, 5)
			ps.SyncHalf()
			x := randT(dev, rng, "x", 1, B, T, C)
			dout := randT(dev, rng, "dout", 1, B, T, C)
			if dt != tensor.F32 {
				x, dout = toHalf(dev, dt, x), toHalf(dev, dt, dout)
			}
			run := func(mode AttentionMode) (out, dx, grads []float32) {
				at.Mode = mode
				ps.ZeroGrad()
				base := dev.Stats().Allocated
				o := dev.Alloc(dt, "out", B, T, C)
				a := at.Forward(o, x, 0, 1)
				if (a.QKV != nil) != (mode == AttnFlash) {
					t.Fatalf("%s: mode %s took the other path", name, mode)
				}
				d := dev.Alloc(dt, "dx", B, T, C)
				at.Backward(d, dout, x, a)
				out, dx, grads = tensor.ToHost(o), tensor.ToHost(d), tensor.ToHost(ps.Grad)
				dev.Free(o)
				dev.Free(d)
				if got := dev.Stats().Allocated; got != base {
					t.Errorf("%s %s: %d bytes still allocated after backward, %d before", name, mode, got, base)
				}
				return
			}
			o1, dx1, g1 := run(AttnMaterialized)
			o2, dx2, g2 := run(AttnFlash)
			tol := map[tensor.DType]float64{tensor.F32: 2e-6, tensor.F16: 1e-2, tensor.BF16: 5e-2}[dt]
			for _, c := range []struct {
				what      string
				got, want []float32
			}{{"out", o2, o1}, {"dx", dx2, dx1}, {"param grads", g2, g1}} {
				if e := relNorm(c.got, c.want); !(e <= tol) {
					t.Errorf("%s: %s: relative L2 error %g > %g", name, c.what, e, tol)
				}
			}
		}
	}
}

func toHalf(dev tensor.Device, dt tensor.DType, x *tensor.Tensor) *tensor.Tensor {
	h := dev.Alloc(dt, x.Tag(), x.Shape()...)
	dev.Copy(h, x)
	dev.Free(x)
	return h
}

// ParseAttentionMode and the GPT's check of flash against dropout.
func TestAttentionMode(t *testing.T) {
	for s, want := range map[string]AttentionMode{"": AttnAuto, "auto": AttnAuto, "flash": AttnFlash, "materialized": AttnMaterialized} {
		if got, err := ParseAttentionMode(s); err != nil || got != want {
			t.Errorf("ParseAttentionMode(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseAttentionMode("fused"); err == nil {
		t.Error("ParseAttentionMode(fused) did not fail")
	}
	cfg := GPTConfig{Layers: 1, Width: 8, Heads: 2, Context: 4, Vocab: 5, Compute: tensor.F32, Dropout: 0.1, Attention: AttnFlash}
	if _, err := NewGPT(cpu.New(), cfg, 1); err == nil {
		t.Error("NewGPT with flash attention and dropout did not fail")
	}
	// The CPU has no fast fused kernel: auto takes the materialised path there.
	if cpu.New().FlashAttentionFast(64, tensor.F16) {
		t.Error("CPU reports a fast fused attention")
	}
}
