//go:build cuda

package model

import (
	"math/rand"
	"testing"
	"time"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The KV-cache decoder on the GPU: the same code as on the CPU (device operations only), its
// logits against the CPU decoder's and against the GPU's own full forward at every step.

func TestCUDADecoder_matchesCPUAndFullForward(t *testing.T) {
	g := gpu(t)
	for _, c := range []struct {
		dt  tensor.DType
		tol float64
	}{{tensor.F32, 1e-4}, {tensor.F16, 2e-2}} {
		t.Run(c.dt.String(), func(t *testing.T) {
			cfg := GPTConfig{Layers: 3, Width: 64, Heads: 4, Context: 32, Vocab: 97, Tied: true, Compute: c.dt}
			mc, err := NewGPT(cpu.New(), cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer mc.Free()
			rng := rand.New(rand.NewSource(3))
			trainFew(t, mc, 20, rng)
			mg, err := NewGPT(g, cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer mg.Free()
			g.Upload(mg.Params().Data, tensor.ToHost(mc.Params().Data))
			mg.Params().SyncHalf()
			base := g.Stats().Allocated
			dc, dg := mc.NewDecoder(), mg.NewDecoder()

			win := []int32{int32(rng.Intn(cfg.Vocab)), int32(rng.Intn(cfg.Vocab)), int32(rng.Intn(cfg.Vocab))}
			for _, d := range []*Decoder{dc, dg} {
				if err := d.Append(win); err != nil {
					t.Fatal(err)
				}
			}
			lc, lg := make([]float32, cfg.Vocab), make([]float32, cfg.Vocab)
			allocs := g.Stats().Allocs
			var worstCPU, worstFull float64
			for step := 0; step < 2*cfg.Context+5; step++ {
				dc.m.dev.Download(lc, dc.Logits())
				g.Download(lg, dg.Logits())
				if e := maxAbsDiff(lg, lc); e > c.tol {
					t.Fatalf("step %d: GPU decoder vs CPU decoder %.3g (tolerance %g)", step, e, c.tol)
				} else {
					worstCPU = max(worstCPU, e)
				}
				if step%5 == 0 {
					if e := maxAbsDiff(lg, fullLogits(mg, win)); e > c.tol {
						t.Fatalf("step %d: GPU decoder vs GPU full forward %.3g (tolerance %g)", step, e, c.tol)
					} else {
						worstFull = max(worstFull, e)
					}
				}
				next := int32(argmax(lc)) // both decoders take the CPU's token
				win = append(win, next)
				for _, d := range []*Decoder{dc, dg} {
					if len(win) > cfg.Context {
						d.Reset()
						err = d.Append(win[len(win)-cfg.Context/2:])
					} else {
						err = d.Append(win[len(win)-1:])
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if len(win) > cfg.Context {
					win = append([]int32(nil), win[len(win)-cfg.Context/2:]...)
				}
			}
			t.Logf("%s: worst relative logit difference %.2g vs the CPU decoder, %.2g vs the GPU full forward; %d device allocations in %d steps (the full forward's included)",
				c.dt, worstCPU, worstFull, g.Stats().Allocs-allocs, 2*cfg.Context+5)
			dc.Free()
			dg.Free()
			if got := g.Stats().Allocated; got != base {
				t.Fatalf("after Free: %d bytes allocated on the GPU, %d before", got, base)
			}
		})
	}
}

// Greedy tokens/s on the GPU, with the cache and recomputing the window per token: the Opticks
// config's size (63 new tokens filling its context of 64) and GPT-2 small's (127 new tokens).
func BenchmarkCUDAGenerate(b *testing.B) {
	g := gpu(b)
	for _, c := range []struct {
		name string
		cfg  GPTConfig
		n    int
	}{
		{"opticksTiny", GPTConfig{Layers: 4, Width: 128, Heads: 4, Context: 64, Vocab: 256, Tied: true}, 63},
		{"gpt2small-f32", GPTConfig{Layers: 12, Width: 768, Heads: 12, Context: 1024, Vocab: 50257, Tied: true}, 127},
		{"gpt2small-f16", GPTConfig{Layers: 12, Width: 768, Heads: 12, Context: 1024, Vocab: 50257, Tied: true, Compute: tensor.F16}, 127},
	} {
		m, err := NewGPT(g, c.cfg, 1)
		if err != nil {
			b.Fatal(err)
		}
		d := m.NewDecoder()
		for _, recompute := range []bool{false, true} {
			name := c.name + "/cache"
			if recompute {
				name = c.name + "/recompute"
			}
			b.Run(name, func(b *testing.B) {
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if _, err := d.Generate([]int32{1}, GenerateOptions{MaxNewTokens: c.n, Recompute: recompute}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(c.n*b.N)/time.Since(start).Seconds(), "tokens/s")
			})
		}
		d.Free()
		m.Free()
	}
}
