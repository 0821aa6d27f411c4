//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// GODDP_COLSUM_VEC=1 sums 8 columns a thread (k_colsum_part8) where k_colsum_part sums one: each
// column's sum keeps its order, so the bias gradients are k_colsum_part's very bits — f16 and f32
// gradients, f32 and f16 sums, row counts that are and are not multiples of the unrolled 32, column
// counts below and above a block's 256, GPT-2 small's shapes. Passed on an H100 (session 17).
func TestCUDA_colsumVecSameBits(t *testing.T) {
	colsumSameBits(t, "GODDP_COLSUM_VEC", "8 columns a thread", [][2]int{{1, 8}, {7, 16}, {33, 264}, {100, 768}, {1000, 2304}, {4096, 3072}, {16384, 768}}, 1)
}

// colsumSameBits checks that BiasGrad with env=1 gives env=0's bits (called calls times into the
// same db): dy f16 and f32, db f32 and f16, each shape (rows, columns).
func colsumSameBits(t *testing.T, env, how string, shapes [][2]int, calls int) {
	g := gpu(t)
	for _, dt := range []tensor.DType{tensor.F16, tensor.F32} {
		for _, odt := range []tensor.DType{tensor.F32, tensor.F16} {
			for i, sh := range shapes {
				r, c := sh[0], sh[1]
				rng := rand.New(rand.NewPCG(uint64(i), uint64(dt)*7+uint64(odt)))
				v := make([]float32, r*c)
				for j := range v {
					v[j] = float32(rng.NormFloat64())
				}
				b0 := make([]float32, c)
				for j := range b0 {
					b0[j] = float32(rng.NormFloat64())
				}
				dy := g.Alloc(dt, "dy", r, c)
				ipcUpload(g, dy, v)
				var got [2][]float32
				for k, on := range []string{"0", "1"} {
					t.Setenv(env, on)
					db := g.Alloc(odt, "db", c)
					ipcUpload(g, db, b0)
					for range calls {
						g.BiasGrad(db, dy)
					}
					got[k] = make([]float32, c)
					g.Download(got[k], db)
					g.Free(db)
				}
				g.Free(dy)
				for j := range got[0] {
					if math.Float32bits(got[0][j]) != math.Float32bits(got[1][j]) {
						t.Fatalf("dy %s, db %s, (%d,%d): column %d sums to %g with %s, %g without", dt, odt, r, c, j, got[1][j], how, got[0][j])
					}
				}
			}
		}
	}
}

// GODDP_COLSUM_FUSED=1 finishes the column sums in the part kernel's last block of each column
// block (k_colsum_partfin) instead of a second launch: the parts are added in k_colsum_finish's
// order, so the bias gradients are its very bits — f16 and f32 gradients, f32 and f16 sums,
// GPT-2 small's shapes, a width past the first counters (40,000 columns: they grow), and each
// sum twice into the same out (the counters are back at zero after a launch). Passed on an H100
// (session 19's whole suite).
func TestCUDA_colsumFusedSameBits(t *testing.T) {
	colsumSameBits(t, "GODDP_COLSUM_FUSED", "one launch", [][2]int{{1, 8}, {7, 13}, {33, 264}, {1000, 2304}, {16384, 768}, {4096, 3072}, {40, 40000}}, 2)
}

// GODDP_COLSUM_FUSED=1 also finishes a LayerNorm backward's dw and db in one launch
// (k_colsum_finish2): the same sums in the same order, so the two k_colsum_finish launches' very
// bits — on the same partial sums (1, 7 and 44 parts; 100, 768 and 1000 columns; f32 and f16 dw
// and db accumulated into twice), and end to end through LayerNormBackward (dx, dw and db) on
// the 8-wide path (768 and 1024 columns), whose parts are deterministic. The generic path's
// parts are not (k_layernorm_bwd_r*'s warps add theirs into shared memory by atomics: session 18's
// H100 run saw dw differ in the last bit between two LayerNormBackward calls at 100 columns), so
// it is checked on given parts. Session 18's first run found the test's own bug (dx accumulates
// and was not reset between the runs); fixed, not yet rerun.
func TestCUDA_lnFinishFusedSameBits(t *testing.T) {
	g := gpu(t)
	for _, odt := range []tensor.DType{tensor.F32, tensor.F16} {
		for i, sh := range [][2]int{{1, 100}, {7, 768}, {44, 1000}} {
			parts, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i)+3, uint64(odt)))
			part := uploaded(g, "part", tensor.F32, normals(rng, parts*2*c), parts*2*c)
			var got [2][2][]float32
			for k, on := range []string{"0", "1"} {
				t.Setenv("GODDP_COLSUM_FUSED", on)
				dw, db := g.Alloc(odt, "dw", c), g.Alloc(odt, "db", c)
				g.Fill(dw, 0.5)
				g.Fill(db, -0.25)
				for range 2 {
					g.lnFinish(dw, db, part, parts, c)
				}
				got[k] = [2][]float32{down(g, dw), down(g, db)}
				g.Free(dw)
				g.Free(db)
			}
			g.Free(part)
			for q, what := range []string{"dw", "db"} {
				sameBits32(t, fmt.Sprintf("%s %s of %d parts × %d columns in one finishing launch", odt, what, parts, c), got[1][q], got[0][q])
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.F16, tensor.F32} {
		for i, sh := range [][2]int{{4096, 768}, {333, 1024}} {
			r, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i)+7, uint64(dt)))
			in := newLNBackwardInputs(g, rng, dt, r, c)
			x, dy, w, mean, rstd := in.x, in.dy, in.w, in.mean, in.rstd
			var got [2][3][]float32
			for k, on := range []string{"0", "1"} {
				t.Setenv("GODDP_COLSUM_FUSED", on)
				dx, dw, db := g.Alloc(dt, "dx", r, c), g.Alloc(tensor.F32, "dw", c), g.Alloc(tensor.F32, "db", c)
				// dx accumulates too: each run starts it from the same values (session 18's H100 run
				// compared a dx that had reused the first run's block: twice the sum).
				g.Fill(dx, 0.125)
				g.Fill(dw, 0.5)
				g.Fill(db, -0.25)
				for range 2 {
					g.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
				}
				got[k] = [3][]float32{down(g, dx), down(g, dw), down(g, db)}
				g.Free(dx)
				g.Free(dw)
				g.Free(db)
			}
			in.free(g)
			for q, what := range []string{"dx", "dw", "db"} {
				sameBits32(t, fmt.Sprintf("%s (%d,%d) %s in one finishing launch", dt, r, c, what), got[1][q], got[0][q])
			}
		}
	}
}

// LayerNormBackwardColSum (tensor.LNBackwardColSummer: a GPT's residual projections' bias
// gradients summed by the layer norm that writes their output gradient) against its composition,
// LayerNormBackward then BiasGrad(s, dx), run twice into the same accumulators: on the 8-wide
// one-pass shapes k_ln_bwd8fs_K must run and give dx, dw and db the composition's very bits (the
// same arithmetic, k_colsum_finish3 finishing dw and db in k_colsum_finish2's order) and s within
// the rounding of other groupings of the same f32 additions (2^-14 of the column's Σ|dx|; a sum
// into the wrong column or of the wrong rows is off by the values themselves); elsewhere (columns
// not a multiple of 256) the composition itself. f16, bf16 and f32. Not yet run on a GPU.
func TestCUDA_lnColSumMatchesComposition(t *testing.T) {
	g := gpu(t)
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16, tensor.F32} {
		for i, sh := range [][2]int{{4096, 768}, {333, 1024}, {100, 256}, {50, 100}} {
			r, c := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(uint64(i)+11, uint64(dt)))
			in := newLNBackwardInputs(g, rng, dt, r, c)
			x, dy, w, mean, rstd := in.x, in.dy, in.w, in.mean, in.rstd
			var got [2][4][]float32
			for k := range 2 {
				dx, dw, db, s := g.Alloc(dt, "dx", r, c), g.Alloc(tensor.F32, "dw", c), g.Alloc(tensor.F32, "db", c), g.Alloc(tensor.F32, "s", c)
				g.Fill(dx, 0.125)
				g.Fill(dw, 0.5)
				g.Fill(db, -0.25)
				g.Fill(s, 0.75)
				g.ProfileStart()
				for range 2 {
					if k == 0 {
						tensor.ComposeLayerNormBackwardColSum(g, dx, dw, db, dy, x, w, mean, rstd, s)
					} else {
						g.LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s)
					}
				}
				fused := strings.Contains(g.ProfileStop(), "k_ln_bwd8fs_")
				if want := k == 1 && c%256 == 0; fused != want {
					t.Fatalf("%s (%d,%d) run %d: k_ln_bwd8fs_K ran: %v, want %v", dt, r, c, k, fused, want)
				}
				got[k] = [4][]float32{down(g, dx), down(g, dw), down(g, db), down(g, s)}
				for _, z := range []*tensor.Tensor{dx, dw, db, s} {
					g.Free(z)
				}
			}
			in.free(g)
			for q, what := range []string{"dx", "dw", "db"} {
				sameBits32(t, fmt.Sprintf("%s (%d,%d) %s", dt, r, c, what), got[1][q], got[0][q])
			}
			dx := got[0][0]
			for col := 0; col < c; col++ {
				abs := 1.0
				for row := 0; row < r; row++ {
					abs += 3 * math.Abs(float64(dx[row*c+col])) // the two runs' dx, generously
				}
				if d := math.Abs(float64(got[1][3][col] - got[0][3][col])); d > abs*math.Ldexp(1, -14) {
					t.Fatalf("%s (%d,%d) column %d: s %g, the composition's %g: off by %g, more than 2^-14 of Σ|dx| %g", dt, r, c, col, got[1][3][col], got[0][3][col], d, abs)
				}
			}
		}
	}
}

// lnBackwardInputs are a LayerNorm backward's operands on the device: x and dy (r,c) and w, b (c)
// of dtype dt, normal draws, and the forward's mean and rstd (y made with them).
type lnBackwardInputs struct{ x, dy, w, b, y, mean, rstd *tensor.Tensor }

func newLNBackwardInputs(g *Device, rng *rand.Rand, dt tensor.DType, r, c int) lnBackwardInputs {
	up := func(tag string, n int, shape ...int) *tensor.Tensor {
		return uploaded(g, tag, dt, normals(rng, n), shape...)
	}
	in := lnBackwardInputs{x: up("x", r*c, r, c), dy: up("dy", r*c, r, c), w: up("w", c, c), b: up("b", c, c)}
	in.y, in.mean, in.rstd = g.Alloc(dt, "y", r, c), g.Alloc(tensor.F32, "mean", r), g.Alloc(tensor.F32, "rstd", r)
	g.LayerNorm(in.y, in.mean, in.rstd, in.x, in.w, in.b, 1e-5)
	return in
}

func (in lnBackwardInputs) free(g *Device) {
	for _, z := range []*tensor.Tensor{in.x, in.dy, in.w, in.b, in.y, in.mean, in.rstd} {
		g.Free(z)
	}
}
