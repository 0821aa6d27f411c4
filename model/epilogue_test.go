package model

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// countingEpilogue is the CPU device with its fused-epilogue calls counted, so a test can tell
// the fused path ran.
type countingEpilogue struct {
	*cpu.Device
	bias, gelu, gradWB, dgelu int
}

func (d *countingEpilogue) LinearBias(y, x, w, b *tensor.Tensor) {
	d.bias++
	d.Device.LinearBias(y, x, w, b)
}

func (d *countingEpilogue) LinearBiasGELU(y, pre, x, w, b *tensor.Tensor) {
	d.gelu++
	d.Device.LinearBiasGELU(y, pre, x, w, b)
}

func (d *countingEpilogue) LinearGradWB(dw, db, dy, x *tensor.Tensor) {
	d.gradWB++
	d.Device.LinearGradWB(dw, db, dy, x)
}

func (d *countingEpilogue) LinearGradDGELU(dx, db, dy, w, pre *tensor.Tensor) {
	d.dgelu++
	d.Device.LinearGradDGELU(dx, db, dy, w, pre)
}

// GemmEpilogue on the CPU composes the same operations as the separate path, so a GPT trained
// with it is bit-identical to one without: loss, gradients and the parameters after AdamW steps,
// in f32 and f16, with and without checkpointing (whose recompute takes the fused forward too),
// and the activation peak is no higher. The counters show the fused calls ran: per block and
// step one LinearBiasGELU (fc; two with a checkpoint's recompute), three LinearBias (qkv,
// attention proj, MLP proj; the recompute adds qkv and attention proj), three LinearGradWB and one
// LinearGradDGELU; parameters report ready in the same order.
func TestGPT_gemmEpilogueSameAsSeparate(t *testing.T) {
	const layers, steps = 3, 3
	run := func(dev tensor.Device, compute tensor.DType, ckpt int, fused bool) gptRun {
		return trainGPTRun(t, dev, GPTConfig{Layers: layers, Width: 16, Heads: 2, Context: 16, Vocab: 30, Dropout: 0.1,
			Compute: compute, Checkpoint: ckpt, GemmEpilogue: fused}, steps)
	}
	for _, compute := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, ckpt := range []int{0, 1} {
			name := fmt.Sprintf("%s checkpoint %d", compute, ckpt)
			ref := run(cpu.New(), compute, ckpt, false)
			dev := &countingEpilogue{Device: cpu.New()}
			got := run(dev, compute, ckpt, true)
			sameGPTRun(t, name+": with the epilogue", got, ref)
			n := layers * steps
			if dev.gelu != n*(1+ckpt) || dev.bias != n*(3+2*ckpt) || dev.gradWB != 3*n || dev.dgelu != n {
				t.Errorf("%s: fused calls gelu %d bias %d gradWB %d dgelu %d, want %d, %d, %d, %d", name, dev.gelu, dev.bias, dev.gradWB, dev.dgelu,
					n*(1+ckpt), n*(3+2*ckpt), 3*n, n)
			}
			if math.IsNaN(float64(got.losses[steps-1])) {
				t.Errorf("%s: loss NaN", name)
			}
		}
	}
}

// A device without the ability runs the separate path even when the config asks.
func TestGPT_gemmEpilogueNeedsTheAbility(t *testing.T) {
	if epilogueOf(plainDevice{cpu.New()}, true) != nil {
		t.Fatal("a device without EpilogueDevice got the fused path")
	}
	if epilogueOf(cpu.New(), true) == nil {
		t.Fatal("the CPU device's EpilogueDevice was not used")
	}
	if epilogueOf(cpu.New(), false) != nil {
		t.Fatal("fused path without GemmEpilogue")
	}
}

// plainDevice hides every optional ability of the device it wraps.
type plainDevice struct{ tensor.Device }

// gptRun is what trainGPTRun saw: each step's loss, the parameters at the end, the largest
// activation peak of a step (above what was allocated before it) and the last step's order of
// ready parameters.
type gptRun struct {
	losses []float32
	params []float32
	peak   int64
	order  []string
}

// trainGPTRun trains a GPT of cfg (seed 7) on dev for steps AdamW steps of 3×16 random tokens
// (seed 11), the same inputs for every call.
func trainGPTRun(t *testing.T, dev tensor.Device, cfg GPTConfig, steps int) gptRun {
	t.Helper()
	m, err := NewGPT(dev, cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	var r gptRun
	m.Params().OnGradReady = func(p *Param) { r.order = append(r.order, p.Name) }
	opt, err := NewAdamW(m.Params(), AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	rng := rand.New(rand.NewSource(11))
	for range steps {
		in := gptInputs(dev, rng, 3, 16, 30)
		base := dev.Stats().Allocated
		dev.ResetPeak()
		r.order = r.order[:0]
		loss, _ := lossAndGrads(m, in, 1)
		r.peak = max(r.peak, dev.Stats().Peak-base)
		r.losses = append(r.losses, loss)
		opt.Step(1e-2)
		dev.Free(in.Tokens)
		dev.Free(in.Targets)
	}
	r.params = m.Params().Host()
	return r
}

// sameGPTRun checks a run (what names it) against the reference: the same losses and parameters
// bit for bit, an activation peak no higher, the same order of ready parameters.
func sameGPTRun(t *testing.T, what string, got, ref gptRun) {
	t.Helper()
	if !sameBits(got.losses, ref.losses) || !sameBits(got.params, ref.params) {
		t.Errorf("%s: losses %v vs %v, parameters rel %.3g: want bit-identical", what, got.losses, ref.losses, relNorm(got.params, ref.params))
	}
	if got.peak > ref.peak {
		t.Errorf("%s: activation peak %s, %s the reference's", what, tensor.FormatBytes(got.peak), tensor.FormatBytes(ref.peak))
	}
	if !slices.Equal(got.order, ref.order) {
		t.Errorf("%s: ready order %v, want %v", what, got.order, ref.order)
	}
}
