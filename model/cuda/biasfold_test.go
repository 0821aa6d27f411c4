//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// The bias folds (tensor.BiasFolder: k_addbias_gelu8, k_addbias_add8) give the separate passes'
// bits — AddBiasGELU against AddBias then GELU (h and g), AddBiasAdd against AddBias then Add,
// with y left as it was — in f32, f16 and bf16, on shapes from one row to GPT-2 small's, and on
// widths that are not a multiple of 8 (the fallback).
func TestCUDA_biasFoldSameBits(t *testing.T) {
	g := gpu(t)
	shapes := [][2]int{{1, 8}, {7, 24}, {5, 13}, {33, 264}, {1000, 2304}, {4096, 3072}, {16384, 768}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(g, dt) != nil {
			continue
		}
		for i, sh := range shapes {
			r, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i), uint64(dt)))
			mk := func(tag string, n int, shape ...int) (*tensor.Tensor, []float32) {
				v := make([]float32, n)
				for j := range v {
					v[j] = float32(rng.NormFloat64()) * 2
				}
				x := g.Alloc(dt, tag, shape...)
				ipcUpload(g, x, v)
				return x, v
			}
			h, hv := mk("h", r*c, r, c)
			b, _ := mk("b", c, c)
			x, _ := mk("x", r*c, r, c)
			h2, y := g.Alloc(dt, "h2", r, c), g.Alloc(dt, "y", r, c)
			ipcUpload(g, h2, hv)
			ipcUpload(g, y, hv)
			gg, g2 := g.Alloc(dt, "g", r, c), g.Alloc(dt, "g2", r, c)
			out, out2 := g.Alloc(dt, "out", r, c), g.Alloc(dt, "out2", r, c)

			g.AddBiasGELU(h, gg, b)
			g.AddBias(h2, b)
			g.GELU(g2, h2)
			yBefore := down(g, y)
			g.AddBiasAdd(out, x, y, b)
			yAfter := down(g, y)
			g.AddBias(y, b)
			g.Add(out2, x, y)

			name := fmt.Sprintf("%s (%d,%d)", dt, r, c)
			sameBits32(t, name+": AddBiasAdd left y", yAfter, yBefore)
			sameBits32(t, name+": AddBiasGELU's h against AddBias", down(g, h), down(g, h2))
			sameBits32(t, name+": AddBiasGELU's g against GELU", down(g, gg), down(g, g2))
			sameBits32(t, name+": AddBiasAdd against AddBias then Add", down(g, out), down(g, out2))
			for _, z := range []*tensor.Tensor{h, b, x, h2, y, gg, g2, out, out2} {
				g.Free(z)
			}
		}
	}
}

func down(g *Device, x *tensor.Tensor) []float32 {
	v := make([]float32, x.Len())
	g.Download(v, x)
	return v
}

func sameBits32(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: element %d is %g, want %g", what, i, a[i], b[i])
		}
	}
}

// GELUBackwardBiasGrad (tensor.GELUBiasGrader: k_gelu_bwd_colsum8 and k_colsum_finish) gives
// GELUBackward then BiasGrad's bits — dx, and db (f32, added into its values) — in f32, f16 and
// bf16, in place (dx aliasing dy, as the GPT block calls it) and apart, on shapes from one row to
// GPT-2 small's fc at b16 (16384, 3072), rows that are not a multiple of the unrolled 32, and a
// width that is not a multiple of 8 (then the two operations themselves); with the column sums'
// default split and GODDP_COLSUM_SPLIT=4's (colsumParts: four times the slices, both ways; that
// case not yet run on a GPU).
func TestCUDA_geluBiasGradSameBits(t *testing.T) {
	for _, split := range []string{"", "4"} {
		t.Run("split="+split, func(t *testing.T) {
			t.Setenv("GODDP_COLSUM_SPLIT", split)
			geluBiasGradSameBits(t)
		})
	}
}

func geluBiasGradSameBits(t *testing.T) {
	g := gpu(t)
	shapes := [][2]int{{1, 8}, {7, 24}, {5, 13}, {33, 264}, {100, 768}, {1000, 2304}, {16384, 3072}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(g, dt) != nil {
			continue
		}
		for i, sh := range shapes {
			for _, inPlace := range []bool{true, false} {
				r, c := sh[0], sh[1]
				rng := rand.New(rand.NewPCG(uint64(i)+11, uint64(dt)))
				vals := func(n int) []float32 {
					v := make([]float32, n)
					for j := range v {
						v[j] = float32(rng.NormFloat64()) * 2
					}
					return v
				}
				xv, dyv, dbv := vals(r*c), vals(r*c), vals(c)
				var got [2][2][]float32
				for k := range 2 {
					x, dy := g.Alloc(dt, "x", r, c), g.Alloc(dt, "dy", r, c)
					ipcUpload(g, x, xv)
					ipcUpload(g, dy, dyv)
					dx := dy
					if !inPlace {
						dx = g.Alloc(dt, "dx", r, c)
					}
					db := g.Alloc(tensor.F32, "db", c)
					ipcUpload(g, db, dbv)
					if k == 0 {
						g.GELUBackward(dx, dy, x)
						g.BiasGrad(db, dx)
					} else {
						g.GELUBackwardBiasGrad(dx, dy, x, db)
					}
					got[k] = [2][]float32{down(g, dx), down(g, db)}
					if !inPlace {
						g.Free(dx)
					}
					for _, z := range []*tensor.Tensor{x, dy, db} {
						g.Free(z)
					}
				}
				name := fmt.Sprintf("%s (%d,%d) in place %v", dt, r, c, inPlace)
				sameBits32(t, name+": dx against GELUBackward", got[1][0], got[0][0])
				sameBits32(t, name+": db against BiasGrad", got[1][1], got[0][1])
			}
		}
	}
}

// GODDP_GELU_TANH_APPROX=1 (the 8-wide GELU kernels' tanh by tanh.approx.f32): a device of its own
// (the option is compiled in at load) gives GELU and its backward within 2^-9 relative (plus 1e-4
// absolute) of the default device's, f32 and f16, on x over [-8, 8] — about the rounding an f16
// output carries anyway — and not bit for bit the same everywhere (else the option compiled
// nothing in). Passed on an H100 (session 21).
func TestCUDA_geluTanhApproxWithinBound(t *testing.T) {
	ref, d := optionDevices(t, "GODDP_GELU_TANH_APPROX")
	const n = 1 << 16
	xs, dys := make([]float32, n), make([]float32, n)
	rng := rand.New(rand.NewPCG(5, 9))
	for i := range xs {
		xs[i] = float32(rng.Float64()*16 - 8)
		dys[i] = float32(rng.NormFloat64())
	}
	run := func(dev *Device, dt tensor.DType) (y, dx []float32) {
		x, dy := dev.Alloc(dt, "x", n), dev.Alloc(dt, "dy", n)
		dev.Upload(x, xs)
		dev.Upload(dy, dys)
		yt, dxt := dev.Alloc(dt, "y", n), dev.Alloc(dt, "dx", n)
		dev.GELU(yt, x)
		dev.GELUBackward(dxt, dy, x)
		y, dx = make([]float32, n), make([]float32, n)
		dev.Download(y, yt)
		dev.Download(dx, dxt)
		for _, v := range []*tensor.Tensor{x, dy, yt, dxt} {
			dev.Free(v)
		}
		return y, dx
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		wy, wdx := run(ref, dt)
		gy, gdx := run(d, dt)
		differ := 0
		for i := range wy {
			for _, p := range [][2]float32{{wy[i], gy[i]}, {wdx[i], gdx[i]}} {
				if p[0] != p[1] {
					differ++
				}
				if diff := math.Abs(float64(p[0] - p[1])); diff > 1e-4+math.Abs(float64(p[0]))/512 {
					t.Fatalf("%s x=%g: tanhf's %g, tanh.approx's %g", dt, xs[i], p[0], p[1])
				}
			}
		}
		t.Logf("%s: %d of %d values differ from tanhf's", dt, differ, 2*n)
		if dt == tensor.F32 && differ == 0 {
			t.Errorf("f32: every value is tanhf's: the option compiled nothing in")
		}
	}
}
