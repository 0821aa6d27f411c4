//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// The 8-wide LayerNorm forward (the default; GODDP_LN_VEC=0 turns it off; k_ln_fwd8_K: the row in registers, 8 wide) agrees with
// k_layernorm within rounding — its sums are grouped otherwise, so not bit for bit: mean and rstd
// within 1e-5 relative, y within a unit of its dtype's last place (f16: 2⁻¹⁰ relative, and 1e-5
// relative for f32) — for C = 256, 512, 768 and 1024, f32 and f16 activations with f32 and f16
// gains, rows not a multiple of the block's 8; C = 100 and 1280 keep k_layernorm (the same bits).
func TestCUDA_layerNorm8MatchesScalar(t *testing.T) {
	g := gpu(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, wdt := range []tensor.DType{tensor.F32, tensor.F16} {
			for i, sh := range [][2]int{{7, 256}, {1000, 768}, {333, 1024}, {64, 512}, {5, 100}, {9, 1280}} {
				r, c := sh[0], sh[1]
				rng := rand.New(rand.NewPCG(uint64(i), uint64(dt)*3+uint64(wdt)))
				up := func(tag string, d tensor.DType, n int, scale, shift float64, shape ...int) *tensor.Tensor {
					v := make([]float32, n)
					for j := range v {
						v[j] = float32(rng.NormFloat64()*scale + shift)
					}
					x := g.Alloc(d, tag, shape...)
					ipcUpload(g, x, v)
					return x
				}
				x := up("x", dt, r*c, 2, 0.5, r, c)
				w, b := up("w", wdt, c, 0.3, 1, c), up("b", wdt, c, 0.2, 0, c)
				var ys, ms, rs [2][]float32
				for k, on := range []string{"0", "1"} {
					t.Setenv("GODDP_LN_VEC", on)
					y, mean, rstd := g.Alloc(dt, "y", r, c), g.Alloc(tensor.F32, "mean", r), g.Alloc(tensor.F32, "rstd", r)
					g.LayerNorm(y, mean, rstd, x, w, b, 1e-5)
					ys[k], ms[k], rs[k] = down(g, y), down(g, mean), down(g, rstd)
					g.Free(y)
					g.Free(mean)
					g.Free(rstd)
				}
				for _, z := range []*tensor.Tensor{x, w, b} {
					g.Free(z)
				}
				name := fmt.Sprintf("x %s, w %s, (%d,%d)", dt, wdt, r, c)
				if c%256 != 0 || c > 1024 { // the scalar kernel either way
					sameBits32(t, name+" y", ys[1], ys[0])
					continue
				}
				within(t, name+" mean", ms[1], ms[0], 1e-5, 1e-6)
				within(t, name+" rstd", rs[1], rs[0], 1e-5, 0)
				rel := 1e-5
				if dt == tensor.F16 {
					rel = 1.0 / 1024
				}
				within(t, name+" y", ys[1], ys[0], rel, 1e-5)
			}
		}
	}
}

// within fails unless |a−b| ≤ rel·|b| + abs elementwise.
func within(t *testing.T, what string, a, b []float32, rel, abs float64) {
	t.Helper()
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > rel*math.Abs(float64(b[i]))+abs {
			t.Fatalf("%s: element %d is %g, want %g (±%g rel, %g abs)", what, i, a[i], b[i], rel, abs)
		}
	}
}

// AddBiasAddLayerNorm (tensor.ResidualNormer: k_addbias_add_ln8_K) gives AddBiasAdd then
// LayerNorm's bits — the sum, the normalised output, mean and rstd — for C = 256, 768 and 1024
// (the 8-wide kernels) and 100 and 1280 (the two operations themselves), f32, f16 and bf16
// activations with f32 gains and biases (the model's LayerNorm reads its f32 master), one row to
// 4096. Passed on an H100 (session 19's whole suite).
func TestCUDA_residualNormSameBits(t *testing.T) {
	g := gpu(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(g, dt) != nil {
			continue
		}
		for i, sh := range [][2]int{{1, 256}, {7, 768}, {4096, 768}, {333, 1024}, {9, 100}, {5, 1280}} {
			r, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i)+21, uint64(dt)))
			up := func(tag string, d tensor.DType, n int, shape ...int) *tensor.Tensor {
				return uploaded(g, tag, d, normals(rng, n), shape...)
			}
			x, y, bias := up("x", dt, r*c, r, c), up("y", dt, r*c, r, c), up("bias", dt, c, c)
			w, b := up("w", tensor.F32, c, c), up("b", tensor.F32, c, c)
			var got [2][4][]float32
			for k := range 2 {
				out, y2 := g.Alloc(dt, "out", r, c), g.Alloc(dt, "y2", r, c)
				mean, rstd := g.Alloc(tensor.F32, "mean", r), g.Alloc(tensor.F32, "rstd", r)
				if k == 0 {
					g.AddBiasAdd(out, x, y, bias)
					g.LayerNorm(y2, mean, rstd, out, w, b, 1e-5)
				} else {
					g.AddBiasAddLayerNorm(out, y2, mean, rstd, x, y, bias, w, b, 1e-5)
				}
				got[k] = [4][]float32{down(g, out), down(g, y2), down(g, mean), down(g, rstd)}
				for _, z := range []*tensor.Tensor{out, y2, mean, rstd} {
					g.Free(z)
				}
			}
			for _, z := range []*tensor.Tensor{x, y, bias, w, b} {
				g.Free(z)
			}
			for q, what := range []string{"out", "y2", "mean", "rstd"} {
				sameBits32(t, fmt.Sprintf("%s (%d,%d) %s in one pass", dt, r, c, what), got[1][q], got[0][q])
			}
		}
	}
}

// GODDP_LN_BWD_FUSED=1's LayerNorm backward in one pass (k_ln_bwd8f_K) gives the two kernels'
// bits — dx (accumulated into its values), dw and db (f32, accumulated) — for C = 256, 512, 768
// and 1024, f32, f16 and bf16 activations with f32 gains, row counts from 7 to 16384 (rows that
// leave the last part short); and so does the early-loading k_ln_bwd8fe_K (the default;
// GODDP_LN_BWD_EARLY=0 takes k_ln_bwd8f_K). Both comparisons passed on an H100 in session 19.
func TestCUDA_lnBackwardFusedSameBits(t *testing.T) {
	g := gpu(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(g, dt) != nil {
			continue
		}
		for i, sh := range [][2]int{{7, 256}, {1000, 512}, {4096, 768}, {333, 1024}, {16384, 768}} {
			r, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i)+31, uint64(dt)))
			xv, dyv, dxv, wv, bv := normals(rng, r*c), normals(rng, r*c), normals(rng, r*c), normals(rng, c), normals(rng, c)
			up := func(tag string, d tensor.DType, v []float32, shape ...int) *tensor.Tensor {
				return uploaded(g, tag, d, v, shape...)
			}
			x, dy := up("x", dt, xv, r, c), up("dy", dt, dyv, r, c)
			w, b := up("w", tensor.F32, wv, c), up("b", tensor.F32, bv, c)
			y, mean, rstd := g.Alloc(dt, "y", r, c), g.Alloc(tensor.F32, "mean", r), g.Alloc(tensor.F32, "rstd", r)
			g.LayerNorm(y, mean, rstd, x, w, b, 1e-5)
			var got [3][3][]float32
			for k, on := range [][2]string{{"0", "0"}, {"1", "0"}, {"1", "1"}} { // fused, early
				t.Setenv("GODDP_LN_BWD_FUSED", on[0])
				t.Setenv("GODDP_LN_BWD_EARLY", on[1])
				dx := up("dx", dt, dxv, r, c)
				dw, db := up("dw", tensor.F32, wv, c), up("db", tensor.F32, bv, c)
				g.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
				got[k] = [3][]float32{down(g, dx), down(g, dw), down(g, db)}
				for _, z := range []*tensor.Tensor{dx, dw, db} {
					g.Free(z)
				}
			}
			for _, z := range []*tensor.Tensor{x, dy, w, b, y, mean, rstd} {
				g.Free(z)
			}
			for q, what := range []string{"dx", "dw", "db"} {
				sameBits32(t, fmt.Sprintf("%s (%d,%d) %s in one pass", dt, r, c, what), got[1][q], got[0][q])
				sameBits32(t, fmt.Sprintf("%s (%d,%d) %s in one pass, dx loaded early", dt, r, c, what), got[2][q], got[0][q])
			}
		}
	}
}

// normals is n values from N(0, 1) drawn from rng.
func normals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for j := range v {
		v[j] = float32(rng.NormFloat64())
	}
	return v
}

// uploaded is a tensor of dtype dt and shape on g holding v.
func uploaded(g *Device, tag string, dt tensor.DType, v []float32, shape ...int) *tensor.Tensor {
	x := g.Alloc(dt, tag, shape...)
	ipcUpload(g, x, v)
	return x
}
