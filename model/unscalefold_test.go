package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// foldScaler is a dynamic scaler whose scale is no power of two, so that x·(1/scale) rounds and the
// order of the products (x·inv, then ·coef) shows in the bits.
func foldScaler(t *testing.T, dev tensor.Device) *Scaler {
	t.Helper()
	sc, err := NewScaler(dev, ScalerConfig{Enabled: true, Init: 3000, Growth: 2, Backoff: 0.5, Interval: 2, MinScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// checkUnscaleFold trains pss[0] with the unscale by a pass (UnscaleCheck or UnscaleCheckNorm,
// then AdamW.StepScaled) and pss[1] with it folded into the step (Scaler.CheckDeferred, then
// AdamW.StepUnscaled) on the same scaled gradients, with GODDP_UNSCALE_FOLD=1, and fails unless
// the two agree bit for bit after every step: weights, 16-bit copy, m, v, the flag, the norm and
// the scale. The steps clip, do not clip (a factor of 0), take the check alone, measure only (max
// 0), and hold an inf (skipped); the folded check leaves the gradients as they were. Then
// Scaler.Step with the switch off (pss[0]) and on (pss[1]): the same bits again. perRun forces
// AdamW's per-run path.
func checkUnscaleFold(t *testing.T, name string, dev tensor.Device, pss [2]*Params, perRun bool) {
	t.Helper()
	t.Setenv("GODDP_UNSCALE_FOLD", "1")
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	var opts [2]*AdamW
	var scs [2]*Scaler
	for k := range pss {
		opt, err := NewAdamW(pss[k], cfg)
		if err != nil {
			t.Fatal(err)
		}
		opt.perRun = perRun
		opts[k], scs[k] = opt, foldScaler(t, dev)
	}
	if _, ok := scs[1].FoldsInto(opts[1]); !ok {
		t.Fatalf("%s: GODDP_UNSCALE_FOLD=1: the scaler does not fold its unscale into AdamW", name)
	}
	same := func(what string) {
		t.Helper()
		for i, p := range [][2]*tensor.Tensor{{pss[0].Data, pss[1].Data}, {pss[0].Half, pss[1].Half}, {opts[0].M, opts[1].M}, {opts[0].V, opts[1].V}} {
			if p[0] == nil {
				continue
			}
			x, y := tensor.ToHost(p[0]), tensor.ToHost(p[1])
			for j := range x {
				if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
					t.Fatalf("%s, %s: %s[%d] %g folded, %g by a pass", name, what, []string{"weights", "half", "m", "v"}[i], j, y[j], x[j])
				}
			}
		}
		if scs[0].Scale() != scs[1].Scale() || opts[0].Steps() != opts[1].Steps() {
			t.Fatalf("%s, %s: scale %g, %d steps folded; %g, %d by a pass", name, what, scs[1].Scale(), opts[1].Steps(), scs[0].Scale(), opts[0].Steps())
		}
	}
	r := rand.New(rand.NewPCG(35, uint64(pss[0].N)))
	gr := make([]float32, pss[0].N)
	steps := []struct {
		maxNorm float32 // < 0: the check alone, no norm
		inf     bool
	}{{0.5, false}, {1e9, false}, {-1, false}, {0, false}, {0.5, true}, {-1, true}, {2, false}, {-1, false}}
	for step, s := range steps {
		what := fmt.Sprintf("step %d (max %g, inf %v)", step, s.maxNorm, s.inf)
		for i := range gr {
			gr[i] = float32(r.NormFloat64()) * scs[0].Scale() * 0.05
		}
		if s.inf {
			gr[len(gr)*2/3] = float32(math.Inf(-1))
		}
		dev.Upload(pss[0].Grad, gr)
		dev.Upload(pss[1].Grad, gr)
		norm := s.maxNorm >= 0
		var found [2]bool
		var nrm [2]float32
		if norm {
			found[0], nrm[0] = scs[0].ReadCheckNorm(scs[0].UnscaleCheckNorm(pss[0]))
		} else {
			found[0] = scs[0].FoundInf(scs[0].UnscaleCheck(pss[0]))
		}
		flag, inv := scs[1].CheckDeferred(pss[1], norm)
		if norm {
			found[1], nrm[1] = scs[1].ReadCheckNorm(flag)
		} else {
			found[1] = scs[1].FoundInf(flag)
		}
		if inv != 1/scs[1].Scale() {
			t.Fatalf("%s, %s: CheckDeferred's inv %g at scale %g", name, what, inv, scs[1].Scale())
		}
		if found[0] != s.inf || found[1] != s.inf {
			t.Fatalf("%s, %s: found %v by a pass, %v folded", name, what, found[0], found[1])
		}
		if !s.inf && math.Float32bits(nrm[0]) != math.Float32bits(nrm[1]) {
			t.Fatalf("%s, %s: norm %g by a pass, %g folded", name, what, nrm[0], nrm[1])
		}
		if g := tensor.ToHost(pss[1].Grad); !sameBits(g, gr) {
			t.Fatalf("%s, %s: the folded check wrote the gradients", name, what)
		}
		if !s.inf {
			coef := ClipCoef(nrm[0], s.maxNorm)
			if clip := s.maxNorm > 0 && nrm[0] > s.maxNorm; clip != (coef != 0) {
				t.Fatalf("%s, %s: norm %g: factor %g", name, what, nrm[0], coef)
			}
			opts[0].StepScaled(1e-2, coef)
			opts[1].StepUnscaled(1e-2, inv, coef)
		}
		for k := range scs {
			if err := scs[k].Update(found[k]); err != nil {
				t.Fatal(err)
			}
		}
		same(what)
	}
	for step := range 3 {
		for i := range gr {
			gr[i] = float32(r.NormFloat64()) * scs[0].Scale() * 0.05
		}
		if step == 1 {
			gr[5] = float32(math.NaN())
		}
		dev.Upload(pss[0].Grad, gr)
		dev.Upload(pss[1].Grad, gr)
		t.Setenv("GODDP_UNSCALE_FOLD", "0")
		okA, errA := scs[0].Step(pss[0], opts[0], 1e-2)
		t.Setenv("GODDP_UNSCALE_FOLD", "1")
		okB, errB := scs[1].Step(pss[1], opts[1], 1e-2)
		if errA != nil || errB != nil || okA != okB || okA != (step != 1) {
			t.Fatalf("%s, Scaler.Step %d: stepped %v (%v) by a pass, %v (%v) folded", name, step, okA, errA, okB, errB)
		}
		if g := tensor.ToHost(pss[1].Grad); !sameBits(g, gr) {
			t.Fatalf("%s, Scaler.Step %d: the folded check wrote the gradients", name, step)
		}
		same(fmt.Sprintf("Scaler.Step %d", step))
	}
	for k := range pss {
		opts[k].Free()
		scs[k].Free()
	}
}

// foldSlab is a slab of several decay runs, long enough that the CPU device's sums and passes
// split it into many chunks.
func foldSlab(dev tensor.Device, compute tensor.DType) *Params {
	ps := NewParams(dev)
	for i, n := range []int{3, 40000, 1, 70001, 17, 5000} {
		ps.Add(string(rune('a'+i)), Init{Std: 0.5}, i%2 == 0, n)
	}
	ps.Build(compute)
	ps.Init(5)
	return ps
}

// On the CPU device, the unscale folded into AdamW (GODDP_UNSCALE_FOLD=1) gives the unscaling
// pass's bits (checkUnscaleFold): f32 and f16 compute, through the multi path (multiCPU) and per
// run. With the switch off the scaler does not fold.
func TestAdamW_unscaleFoldSameBits(t *testing.T) {
	for _, compute := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, multi := range []bool{false, true} {
			var dev tensor.Device = cpu.New()
			if multi {
				dev = &multiCPU{Device: cpu.New()}
			}
			pss := [2]*Params{foldSlab(dev, compute), foldSlab(dev, compute)}
			checkUnscaleFold(t, fmt.Sprintf("%s multi %v", compute, multi), dev, pss, false)
		}
	}
	t.Setenv("GODDP_UNSCALE_FOLD", "0")
	dev := cpu.New()
	ps := foldSlab(dev, tensor.F16)
	opt, _ := NewAdamW(ps, DefaultAdamW())
	if _, ok := foldScaler(t, dev).FoldsInto(opt); ok {
		t.Fatal("GODDP_UNSCALE_FOLD=0: the scaler folds its unscale into AdamW")
	}
}
