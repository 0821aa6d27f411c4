//go:build cuda

package model

import (
	"fmt"
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
			for _, c := range []struct {
				what string
				a, b *tensor.Tensor
			}{
				{"w", pss[0].Data, pss[1].Data},
				{"half", pss[0].Half, pss[1].Half},
				{"m", opts[0].M, opts[1].M},
				{"v", opts[0].V, opts[1].V},
			} {
				if c.a == nil {
					continue
				}
				bitsEqual(t, name+" step "+string(rune('0'+step))+" "+c.what, tensor.ToHost(c.a), tensor.ToHost(c.b))
			}
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

// The fused k_sgd_multi (GODDP_SGD_MULTI=1) gives k_sgd's per-run results bit for bit (params, f16 copy, momentum
// after three steps), with momentum and Nesterov, with momentum alone and without it, on a slab
// of alternating decay runs; memory returns to its baseline after Free.
func TestCUDA_sgdMultiMatchesPerRun(t *testing.T) {
	t.Setenv("GODDP_SGD_MULTI", "1") // off by default until the whole suite has run with it
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
