//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// CrossEntropyWithGrad's one launch (GODDP_XENT_FUSED=1) gives the bits of CrossEntropy then
// CrossEntropyBackward: the losses and the gradient, in place (dlogits aliasing logits, as the loss
// head calls it) and apart, f32 and f16 logits, vocabularies that take the 8-wide path (5008,
// 50304) and one that does not (5003), an ignored row.
func TestCUDA_crossEntropyWithGradSameBits(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(3, 11))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, V := range []int{5003, 5008, 50304} {
			for _, inPlace := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/V%d/inplace=%v", dt, V, inPlace), func(t *testing.T) {
					const R = 37
					host := make([]float32, R*V)
					for i := range host {
						host[i] = float32(r.NormFloat64() * 3)
					}
					tg := make([]int32, R)
					for i := range tg {
						tg[i] = int32(r.IntN(V))
					}
					tg[5] = -1
					targets := d.Alloc(tensor.I32, "targets", R)
					defer d.Free(targets)
					d.UploadI32(targets, tg)
					run := func(one bool) ([]float32, []float32) {
						logits := tensor.FromHost(d, dt, "logits", host, R, V)
						defer d.Free(logits)
						dl := logits
						if !inPlace {
							dl = d.Alloc(dt, "dlogits", R, V)
							defer d.Free(dl)
						}
						losses := d.Alloc(tensor.F32, "losses", R)
						defer d.Free(losses)
						if one {
							d.crossEntropyOneLaunch(losses, dl, logits, targets, 0.125)
						} else {
							d.CrossEntropy(losses, logits, targets)
							d.CrossEntropyBackward(dl, logits, targets, 0.125)
						}
						return tensor.ToHost(losses), tensor.ToHost(dl)
					}
					l2, g2 := run(false)
					l1, g1 := run(true)
					for i := range l2 {
						if l1[i] != l2[i] {
							t.Fatalf("loss of row %d: one launch %g, two %g", i, l1[i], l2[i])
						}
					}
					for i := range g2 {
						if g1[i] != g2[i] {
							t.Fatalf("gradient element %d (row %d): one launch %g, two %g", i, i/V, g1[i], g2[i])
						}
					}
					if l1[5] != 0 || g1[5*V] != 0 {
						t.Errorf("the ignored row: loss %g, gradient %g, want 0", l1[5], g1[5*V])
					}
				})
			}
		}
	}
}
