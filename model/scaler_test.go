package model

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

func snapshot(ts ...*tensor.Tensor) [][]float32 {
	out := make([][]float32, len(ts))
	for i, t := range ts {
		out[i] = tensor.ToHost(t)
	}
	return out
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// An injected +Inf in one gradient skips exactly that step: master weights, the f16 copy and
// AdamW's m, v and step count stay bit-identical, the scale halves, the skip is counted; the next
// clean step goes through.
func TestScaler_injectedInfSkipsStep(t *testing.T) {
	dev := cpu.New()
	m, err := NewMLP(dev, MLPConfig{Widths: []int{6, 8, 3}, Compute: tensor.F16}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Params()
	opt, _ := NewAdamW(ps, DefaultAdamW())
	sc, _ := NewScaler(dev, DefaultScaler())
	rng := rand.New(rand.NewSource(1))
	in := mlpInputs(dev, rng, 16, 6, 3)
	step := func(inject bool) bool {
		ps.ZeroGrad()
		m.Forward(in, true)
		m.Backward(sc.Scale())
		if inject {
			g := tensor.ToHost(ps.Grad)
			g[len(g)/2] = float32(math.Inf(1))
			dev.Upload(ps.Grad, g)
		}
		stepped, err := sc.Step(ps, opt, 1e-3)
		if err != nil {
			t.Fatal(err)
		}
		return stepped
	}
	if !step(false) {
		t.Fatal("clean step skipped")
	}
	before := snapshot(ps.Data, ps.Half, opt.M, opt.V)
	steps, scale := opt.Steps(), sc.Scale()
	if step(true) {
		t.Fatal("step with +Inf gradient was taken")
	}
	for i, after := range snapshot(ps.Data, ps.Half, opt.M, opt.V) {
		if !sameBits(before[i], after) {
			t.Fatalf("tensor %d changed by a skipped step", i)
		}
	}
	if opt.Steps() != steps || sc.Scale() != scale/2 || sc.Skipped() != 1 {
		t.Fatalf("after skip: steps %d (was %d), scale %v (was %v), skipped %d", opt.Steps(), steps, sc.Scale(), scale, sc.Skipped())
	}
	if !step(false) || opt.Steps() != steps+1 || sc.Skipped() != 1 {
		t.Fatal("the step after a skip must go through")
	}
	m.Free()
	opt.Free()
	sc.Free()
}

func TestScaler_growthAndFloor(t *testing.T) {
	dev := cpu.New()
	cfg := DefaultScaler()
	cfg.Interval = 3
	cfg.MinScale = 16384
	sc, err := NewScaler(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		sc.Update(false)
	}
	if sc.Scale() != 65536 {
		t.Fatalf("grew early: %v", sc.Scale())
	}
	sc.Update(false)
	if sc.Scale() != 131072 || sc.State().Clean != 0 {
		t.Fatalf("after 3 clean steps: %+v", sc.State())
	}
	sc.Update(false)
	sc.Update(true) // an overflow resets the count of clean steps
	sc.Update(false)
	sc.Update(false)
	if sc.Scale() != 65536 {
		t.Fatalf("overflow must halve and reset growth: %+v", sc.State())
	}
	st := sc.State()
	sc.Update(true)
	if err := sc.Update(true); err != nil { // 16384: at the floor, not below it
		t.Fatal(err)
	}
	err = sc.Update(true)
	if err == nil || !strings.Contains(err.Error(), "below the floor") {
		t.Fatalf("scale under the floor: err = %v", err)
	}
	sc.SetState(st)
	if sc.Scale() != 65536 || sc.Skipped() != 1 {
		t.Fatalf("SetState: %+v", sc.State())
	}

	off, _ := NewScaler(dev, ScalerConfig{})
	if off.Scale() != 1 || off.Update(true) != nil || off.Scale() != 1 {
		t.Fatal("a disabled scaler keeps scale 1")
	}
}

// A nearly converged classifier under f16: its loss gradients (≈1e-8 per logit) are below f16's
// smallest subnormal, so with loss scale 1 every gradient is exactly zero and AdamW cannot move;
// scaled by 65536 they survive, and the loss keeps falling.
func TestScaler_underflowWithoutScaling(t *testing.T) {
	run := func(scaled bool) (first, last float32, gradNorm float32) {
		dev := cpu.New()
		m, err := NewMLP(dev, MLPConfig{Widths: []int{3, 3}, Compute: tensor.F16}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ps := m.Params()
		w := make([]float32, ps.N) // W = 14·I, b = 0: logit margin 14, p(wrong) ≈ 8e-7
		for i := 0; i < 3; i++ {
			w[i*3+i] = 14
		}
		dev.Upload(ps.Data, w)
		ps.SyncHalf()
		const B = 128
		x, tg := make([]float32, B*3), make([]int32, B)
		for i := range tg {
			tg[i] = int32(i % 3)
			x[i*3+i%3] = 1
		}
		in := Inputs{X: tensor.FromHost(dev, tensor.F32, "x", x, B, 3), Targets: dev.Alloc(tensor.I32, "t", B), Valid: B}
		dev.UploadI32(in.Targets, tg)
		opt, _ := NewAdamW(ps, AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		cfg := DefaultScaler()
		if !scaled {
			cfg.Init, cfg.MinScale = 1, 0
		}
		sc, _ := NewScaler(dev, cfg)
		for i := 0; i < 10; i++ {
			ps.ZeroGrad()
			loss := tensor.ToHost(m.Forward(in, true))[0]
			if i == 0 {
				first = loss
			}
			last = loss
			m.Backward(sc.Scale())
			gradNorm = max(gradNorm, ClipGradNorm(ps, 0))
			if _, err := sc.Step(ps, opt, 0.1); err != nil {
				t.Fatal(err)
			}
		}
		return first, last, gradNorm
	}
	f1, l1, g1 := run(false)
	f2, l2, g2 := run(true)
	t.Logf("scale 1: loss %.3g → %.3g, max grad norm %g; scale 65536: loss %.3g → %.3g, grad norm %g", f1, l1, g1, f2, l2, g2)
	if !(f1 > 0) || g1 != 0 || l1 != f1 {
		t.Errorf("without scaling the f16 gradients should underflow to 0 and the loss stay put: %g → %g, grad norm %g", f1, l1, g1)
	}
	if g2 == 0 || !(l2 < 0.5*f2) {
		t.Errorf("with scaling the loss should fall: %g → %g (grad norm %g)", f2, l2, g2)
	}
}
