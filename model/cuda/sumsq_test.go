//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// SumSquaresF64 over views of one slab (ddp's sharded gradient norm) against the float64 sum
// on the host: within float64's rounding (the order of additions differs), far inside f32's
// 6e-8, for sizes across the block counts and an empty view; f16 views too.
func TestCUDA_sumSquaresF64(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(5, 9))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		host := make([]float32, 3_000_001)
		for i := range host {
			host[i] = float32(r.NormFloat64())
		}
		slab := tensor.FromHost(d, dt, "slab", host, len(host))
		back := make([]float32, len(host))
		d.Download(back, slab) // the values as stored (f16 rounds them)
		ranges := [][2]int{{0, 1}, {7, 7}, {10, 1033}, {5000, 2_000_000}, {2_000_000, 3_000_001}}
		var views []*tensor.Tensor
		var want float64
		for _, rg := range ranges {
			views = append(views, slab.View(rg[0], rg[1]-rg[0]))
			for _, v := range back[rg[0]:rg[1]] {
				want += float64(v) * float64(v)
			}
		}
		got := d.SumSquaresF64(views)
		if rel := math.Abs(got-want) / want; rel > 1e-12 {
			t.Errorf("%s: SumSquaresF64 %.17g, host float64 sum %.17g (rel %.2g, want ≤ 1e-12)", dt, got, want, rel)
		}
		if z := d.SumSquaresF64(nil); z != 0 {
			t.Errorf("%s: SumSquaresF64 of no views = %g, want 0", dt, z)
		}
		d.Free(slab)
	}
}
