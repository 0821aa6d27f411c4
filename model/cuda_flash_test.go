//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The fused attention kernels against the CPU's reference FlashAttention (cpu_flash.go), whose
// agreement with the materialised path flash_test.go checks: forward output and log-sum-exp, and
// the backward's dq, dk, dv, on sequence lengths that are and are not multiples of the 64-row tile.
func TestCUDA_flashAttentionMatchesCPU(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.F16) {
		t.Skipf("no fused attention on %s", g.DeviceName())
	}
	base := g.Stats().Allocated
	for i, sh := range [][3]int{{1, 1, 1}, {2, 64, 3}, {2, 100, 2}, {1, 200, 12}, {1, 1024, 2}} {
		B, T, H := sh[0], sh[1], sh[2]
		C := 64 * H
		c := cuOpCase{fmt.Sprintf("FlashAttention/B%d.T%d.H%d", B, T, H), func(m *cuMaker) []*tensor.Tensor {
			qkv := m.in(tensor.F16, B, T, 3*C)
			y, lse := m.out(tensor.F16, B, T, C), m.out(tensor.F32, B, H, T)
			m.dev.FlashAttention(y, lse, qkv, H, 0.125)
			dy := m.in(tensor.F16, B, T, C)
			dqkv := m.out(tensor.F16, B, T, 3*C)
			m.dev.FlashAttentionBackward(dqkv, dy, qkv, y, lse, H, 0.125)
			return []*tensor.Tensor{y, lse, dqkv}
		}}
		cuRunCase(t, g, c, uint64(500+i))
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after the flash tests, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// A GPT with head size 64 trains the same on the GPU through the fused attention as on the CPU
// through the materialised one (loss and every gradient to f16 rounding); with checkpointing on
// the GPU the gradients are unchanged.
func TestCUDA_gptFlashMatchesCPU(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.F16) {
		t.Skipf("no fused attention on %s", g.DeviceName())
	}
	base := g.Stats().Allocated
	cfg := GPTConfig{Layers: 2, Width: 128, Heads: 2, Context: 160, Vocab: 97, Tied: true, Compute: tensor.F16}
	type result struct {
		loss  float32
		grads []float32
		m     *GPT
	}
	run := func(dev tensor.Device, mode AttentionMode, ckpt int) result {
		c := cfg
		c.Attention, c.Checkpoint = mode, ckpt
		m, err := NewGPT(dev, c, 7)
		if err != nil {
			t.Fatal(err)
		}
		in := cuGPTInputs(dev, rand.New(rand.NewPCG(1, 2)), 3, 150, cfg.Vocab)
		m.Params().ZeroGrad()
		loss := tensor.ToHost(m.Forward(in, true))[0]
		if ckpt == 0 && (m.acts[0].Attn.QKV != nil) != (mode != AttnMaterialized) {
			t.Fatalf("%s: mode %s took the other path", dev.Name(), mode)
		}
		m.Backward(1)
		r := result{loss, tensor.ToHost(m.Params().Grad), m}
		dev.Free(in.Tokens)
		dev.Free(in.Targets)
		return r
	}
	cpu := run(cpu.New(), AttnMaterialized, 0)
	gf := run(g, AttnAuto, 0)
	gc := run(g, AttnAuto, 1)
	if e := math.Abs(float64(gf.loss-cpu.loss)) / math.Abs(float64(cpu.loss)); !(e <= 1e-2) {
		t.Errorf("loss GPU flash %v, CPU %v", gf.loss, cpu.loss)
	}
	identical := true
	for _, p := range cpu.m.Params().List {
		n := tensor.Numel(p.Shape)
		want, got, ck := cpu.grads[p.Offset:p.Offset+n], gf.grads[p.Offset:p.Offset+n], gc.grads[p.Offset:p.Offset+n]
		if e := relNorm(got, want); !(e <= 0.1) {
			t.Errorf("gradient of %s: GPU flash vs CPU relative error %g > 0.1", p.Name, e)
		}
		if e := relNorm(ck, got); !(e <= 1e-3) {
			t.Errorf("gradient of %s: GPU flash with checkpointing vs without: relative error %g > 1e-3", p.Name, e)
		}
		for j := range got {
			if got[j] != ck[j] {
				identical = false
			}
		}
	}
	t.Logf("checkpointed gradients bit-identical to the plain run: %v", identical)
	cpu.m.Free()
	gf.m.Free()
	gc.m.Free()
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after freeing the models, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}
