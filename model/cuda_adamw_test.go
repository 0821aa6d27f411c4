//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// The fused k_adamw_multi (one launch per step) gives k_adamw's per-run results bit for bit:
// params, f16 copy, m and v after three steps, on a tiny GPT (f16) and on a slab of runs large
// enough that each thread crosses several runs and several grid strides. Memory returns to its
// baseline after Free, run table included.
func TestCUDA_adamwMultiMatchesPerRun(t *testing.T) {
	g := gpu(t)
	base := g.Stats().Allocated
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

	check := func(name string, mk func() (*Params, func())) {
		var pss [2]*Params
		var opts [2]*AdamW
		var frees [2]func()
		for k := range pss {
			pss[k], frees[k] = mk()
			opt, err := NewAdamW(pss[k], cfg)
			if err != nil {
				t.Fatal(err)
			}
			if opt.multi == nil || opt.table == nil {
				t.Fatalf("%s: the CUDA device does not take the multi path", name)
			}
			opt.perRun = k == 1
			opts[k] = opt
		}
		r := rand.New(rand.NewPCG(4, 2))
		for step := 1; step <= 3; step++ {
			gr := make([]float32, pss[0].N)
			for i := range gr {
				gr[i] = float32(r.NormFloat64())
			}
			for k := range pss {
				g.Upload(pss[k].Grad, gr)
				opts[k].Step(1e-2 * float32(step))
			}
			adamwBitsEqual(t, name+" step "+string(rune('0'+step)), pss, opts)
		}
		for k := range pss {
			opts[k].Free()
			frees[k]()
		}
	}

	check("gpt", func() (*Params, func()) {
		m, err := NewGPT(g, cuTinyGPT(tensor.F16), 3)
		if err != nil {
			t.Fatal(err)
		}
		return m.Params(), m.Free
	})
	check("slab", func() (*Params, func()) {
		ps := runSlab(g)
		return ps, ps.Free
	})
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after freeing, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// The fused k_sgd_multi (the default; GODDP_SGD_MULTI=0 turns it off) gives k_sgd's per-run results bit for bit (params, f16 copy, momentum
// after three steps), with momentum and Nesterov, with momentum alone and without it, on a slab
// of alternating decay runs; memory returns to its baseline after Free.
func TestCUDA_sgdMultiMatchesPerRun(t *testing.T) {
	t.Setenv("GODDP_SGD_MULTI", "1") // whatever the environment says
	g := gpu(t)
	base := g.Stats().Allocated
	for _, cfg := range []SGDConfig{
		{Momentum: 0.9, WeightDecay: 1e-4, Nesterov: true},
		{Momentum: 0.9, WeightDecay: 1e-4},
		{WeightDecay: 0.1},
	} {
		var pss [2]*Params
		var opts [2]*SGD
		for k := range pss {
			ps := runSlab(g)
			opt, err := NewSGD(ps, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if opt.multi == nil || opt.table == nil {
				t.Fatal("the CUDA device does not take SGD's multi path")
			}
			opt.perRun = k == 1
			pss[k], opts[k] = ps, opt
		}
		r := rand.New(rand.NewPCG(5, 3))
		for step := 1; step <= 3; step++ {
			gr := make([]float32, pss[0].N)
			for i := range gr {
				gr[i] = float32(r.NormFloat64())
			}
			for k := range pss {
				g.Upload(pss[k].Grad, gr)
				opts[k].Step(1e-2 * float32(step))
			}
			name := fmt.Sprintf("%+v step %d", cfg, step)
			bitsEqual(t, name+" w", tensor.ToHost(pss[0].Data), tensor.ToHost(pss[1].Data))
			bitsEqual(t, name+" half", tensor.ToHost(pss[0].Half), tensor.ToHost(pss[1].Half))
			if opts[0].Mom != nil {
				bitsEqual(t, name+" momentum", tensor.ToHost(opts[0].Mom), tensor.ToHost(opts[1].Mom))
			}
		}
		for k := range pss {
			opts[k].Free()
			pss[k].Free()
		}
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after freeing, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// adamwBitsEqual checks that two AdamW runs hold the same bits: weights, half copy, m and v.
func adamwBitsEqual(t *testing.T, name string, pss [2]*Params, opts [2]*AdamW) {
	t.Helper()
	for _, c := range []struct {
		what string
		a, b *tensor.Tensor
	}{
		{"w", pss[0].Data, pss[1].Data},
		{"half", pss[0].Half, pss[1].Half},
		{"m", opts[0].M, opts[1].M},
		{"v", opts[0].V, opts[1].V},
	} {
		if c.a != nil {
			bitsEqual(t, name+" "+c.what, tensor.ToHost(c.a), tensor.ToHost(c.b))
		}
	}
}

// runSlab is an f16 parameter set whose decay runs alternate (with a few neighbours of equal
// flag, merged into one run) over sizes large enough that a thread crosses several runs and
// several grid strides.
func runSlab(g tensor.Device) *Params {
	ps := NewParams(g)
	sizes := []int{1, 3, 700000, 5, 1, 300001, 17, 2000000, 256, 255, 1, 1000003, 9, 8, 400000}
	for i, n := range sizes {
		ps.Add(string(rune('a'+i)), Init{Std: 0.5}, i%3 != 1, n)
	}
	ps.Build(tensor.F16)
	ps.Init(11)
	return ps
}

// With clipping fused (GODDP_CLIP_FUSED, the default), AdamW.StepScaled(lr, c) on the CUDA device (the clip factor inside
// k_adamw and k_adamw_multi) gives ClipGradNorm's scaling pass then Step bit for bit: weights, f16
// copy, m and v over five steps that clip and do not, through the multi launch and per run, and
// GradNormCoef's norm is ClipGradNorm's.
func TestCUDA_adamwScaledIsScaleThenStep(t *testing.T) {
	g := gpu(t)
	t.Setenv("GODDP_CLIP_FUSED", "1")
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for _, perRun := range []bool{false, true} {
		var pss [2]*Params
		var opts [2]*AdamW
		for k := range pss {
			pss[k] = runSlab(g)
			opt, err := NewAdamW(pss[k], cfg)
			if err != nil {
				t.Fatal(err)
			}
			opt.perRun = perRun
			opts[k] = opt
		}
		if !opts[1].GradScaled() {
			t.Fatal("GODDP_CLIP_FUSED=1: the CUDA device's AdamW takes no gradient scale")
		}
		r := rand.New(rand.NewPCG(7, 1))
		gr := make([]float32, pss[0].N)
		for step, maxNorm := range []float32{500, 0, 1e9, 3, 2000} {
			for i := range gr {
				gr[i] = float32(r.NormFloat64()) * 3
			}
			g.Upload(pss[0].Grad, gr)
			g.Upload(pss[1].Grad, gr)
			normA := ClipGradNorm(pss[0], maxNorm)
			opts[0].Step(1e-2)
			normB, coef := GradNormCoef(pss[1], maxNorm)
			if normA != normB {
				t.Fatalf("perRun %v step %d: GradNormCoef's norm %g, ClipGradNorm's %g", perRun, step, normB, normA)
			}
			if clip := maxNorm > 0 && normB > maxNorm; clip != (coef != 0) {
				t.Fatalf("perRun %v step %d: norm %g, max %g: factor %g", perRun, step, normB, maxNorm, coef)
			}
			opts[1].StepScaled(1e-2, coef)
			name := fmt.Sprintf("perRun %v step %d (max %g, factor %g)", perRun, step, maxNorm, coef)
			adamwBitsEqual(t, name, pss, opts)
		}
		for k := range pss {
			opts[k].Free()
			pss[k].Free()
		}
	}
}

// With clipping fused (the default), the scaler's UnscaleCheckNorm (k_unscale_sumsq: the unscale, the
// inf check and the squares in one read) gives UnscaleCheck then GradNormCoef's bits: the
// unscaled gradients, the flag and the norm, on a slab of several grid strides, clean and with
// one inf; the fused path is the one taken.
func TestCUDA_unscaleCheckNormSameBits(t *testing.T) {
	g := gpu(t)
	t.Setenv("GODDP_CLIP_FUSED", "1")
	r := rand.New(rand.NewPCG(9, 3))
	for _, inf := range []bool{false, true} {
		var pss [2]*Params
		var scs [2]*Scaler
		for k := range pss {
			pss[k] = runSlab(g)
			sc, err := NewScaler(g, DefaultScaler())
			if err != nil {
				t.Fatal(err)
			}
			scs[k] = sc
		}
		if !scs[1].FusesNorm() {
			t.Fatal("GODDP_CLIP_FUSED=1: the CUDA device does not fuse the unscale and the squares")
		}
		gr := make([]float32, pss[0].N)
		for i := range gr {
			gr[i] = float32(r.NormFloat64()) * 65536
		}
		if inf {
			gr[len(gr)/3] = float32(math.Inf(1))
		}
		g.Upload(pss[0].Grad, gr)
		g.Upload(pss[1].Grad, gr)
		foundA := scs[0].FoundInf(scs[0].UnscaleCheck(pss[0]))
		normA, _ := GradNormCoef(pss[0], 1)
		foundB, normB := scs[1].ReadCheckNorm(scs[1].UnscaleCheckNorm(pss[1]))
		if foundA != inf || foundB != inf {
			t.Errorf("inf %v: found %v by UnscaleCheck, %v by UnscaleCheckNorm", inf, foundA, foundB)
		}
		if !inf && math.Float32bits(normA) != math.Float32bits(normB) {
			t.Errorf("norm %g by GradNormCoef, %g with the check", normA, normB)
		}
		bitsEqual(t, fmt.Sprintf("inf %v: unscaled gradients", inf), tensor.ToHost(pss[0].Grad), tensor.ToHost(pss[1].Grad))
		for k := range pss {
			scs[k].Free()
			pss[k].Free()
		}
	}
}

// With the unscale folded (GODDP_UNSCALE_FOLD=1), the scaler's check reads the gradients without
// writing them back (k_check_sumsq with the norm, k_check alone) and k_adamw, k_adamw_multi
// multiply each gradient by the inverse scale before the clip factor: the unscaling pass's bits
// (checkUnscaleFold: weights, f16 copy, m, v, the flag, the norm and the scale over steps that
// clip, do not, take the check alone, measure only and hold an inf, then Scaler.Step off and on),
// through the multi launch and per run, on a slab of several grid strides. Passed on an H100 (session 21).
func TestCUDA_unscaleFoldSameBits(t *testing.T) {
	g := gpu(t)
	t.Setenv("GODDP_CLIP_FUSED", "1")
	for _, perRun := range []bool{false, true} {
		pss := [2]*Params{runSlab(g), runSlab(g)}
		checkUnscaleFold(t, fmt.Sprintf("perRun %v", perRun), g, pss, perRun)
		for k := range pss {
			pss[k].Free()
		}
	}
}
