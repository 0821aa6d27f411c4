//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// The fused epilogues (lt.go) against the CPU device's composition of its separate operations,
// within the dtype's tolerance (cuTol): GPT-2-like shapes, which must run fused (cublasLt has
// algorithms for them: the counters say so), and odd ones, which may be composed instead.
// Forward: y = x·wᵀ + b and y = GELU(pre), pre = x·wᵀ + b, with the bias in the activations'
// dtype and in f32. Backward: dw += dyᵀ·x with db += colsum(dy), and dx = GELU'(pre)⊙(dy·w) with
// db += colsum(dx), both accumulating into random f32 gradients. In f32 the tolerance (1e-5
// relative) also tells cublasLt's GELU from another formula: the erf form differs from the tanh
// form by ~1e-4 relative.
func TestCUDA_epilogueMatchesCPU(t *testing.T) {
	t.Setenv("GODDP_BGRAD_EPI", "1") // the fused path, whatever the environment asks (its failure in session 19: =0 composes by design)
	t.Setenv("GODDP_LT_TUNE", "0")   // the heuristic's algorithms (the shared device's plans cache them)
	epilogueMatchesCPU(t, gpu(t))
}

// GODDP_LT_TUNE=1 (lt_tune.go; passed on an H100 in session 23): the same cases on a device of its
// own, whose plans are all new, so each fused one is tuned at its first use (timed, or taken from
// the choices an earlier run kept for this GPU model) — within the same tolerance of
// the CPU whatever algorithm the timing kept, no scratch left allocated, and at least one plan
// had candidates to time (the counter: a cublasLt that offers one algorithm per GPT-2-like shape
// would leave the knob nothing to do).
func TestCUDA_ltTuneMatchesCPU(t *testing.T) {
	d := freshDevice(t, "GODDP_BGRAD_EPI", "1", "GODDP_LT_TUNE", "1")
	epilogueMatchesCPU(t, d)
	if d.lt == nil || d.lt.Tuned == 0 {
		t.Errorf("GODDP_LT_TUNE=1 tuned no plan: cublasLt offered one algorithm or none for every case")
	} else {
		t.Logf("%d plans tuned of %d", d.lt.Tuned, len(d.lt.algos))
	}
}

// epilogueMatchesCPU runs TestCUDA_epilogueMatchesCPU's cases on g.
func epilogueMatchesCPU(t *testing.T, g *Device) {
	base := g.Stats().Allocated
	type shape struct {
		R, In, Out int
		fused      bool // must run through cublasLt
	}
	shapes := []shape{{64, 128, 512, true}, {96, 512, 128, true}, {37, 13, 29, false}, {5, 24, 40, false}}
	var cases []cuOpCase
	var mustFuse []bool // per case: a GPT-2-like shape in the model's dtypes (bias in the activations')
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for _, bdt := range []tensor.DType{dt, tensor.F32} {
			for _, s := range shapes {
				name := fmt.Sprintf("%s bias %s %dx%dx%d", dt, bdt, s.R, s.In, s.Out)
				mustFuse = append(mustFuse, s.fused && bdt == dt, s.fused && bdt == dt)
				cases = append(cases,
					cuOpCase{"LinearBias/" + name, func(m *cuMaker) []*tensor.Tensor {
						y := m.out(dt, s.R, s.Out)
						m.dev.(tensor.EpilogueDevice).LinearBias(y, m.in(dt, s.R, s.In), m.in(dt, s.Out, s.In), m.in(bdt, s.Out))
						return []*tensor.Tensor{y}
					}},
					cuOpCase{"LinearBiasGELU/" + name, func(m *cuMaker) []*tensor.Tensor {
						y, pre := m.out(dt, s.R, s.Out), m.out(dt, s.R, s.Out)
						m.dev.(tensor.EpilogueDevice).LinearBiasGELU(y, pre, m.in(dt, s.R, s.In), m.in(dt, s.Out, s.In), m.in(bdt, s.Out))
						return []*tensor.Tensor{y, pre}
					}})
			}
		}
		for _, s := range shapes {
			name := fmt.Sprintf("%s %dx%dx%d", dt, s.R, s.In, s.Out)
			mustFuse = append(mustFuse, s.fused, s.fused)
			cases = append(cases,
				cuOpCase{"LinearGradWB/" + name, func(m *cuMaker) []*tensor.Tensor {
					dw, db := m.acc(tensor.F32, s.Out, s.In), m.acc(tensor.F32, s.Out)
					m.dev.(tensor.EpilogueDevice).LinearGradWB(dw, db, m.in(dt, s.R, s.Out), m.in(dt, s.R, s.In))
					return []*tensor.Tensor{dw, db}
				}},
				cuOpCase{"LinearGradDGELU/" + name, func(m *cuMaker) []*tensor.Tensor {
					dx, db := m.out(dt, s.R, s.In), m.acc(tensor.F32, s.In)
					m.dev.(tensor.EpilogueDevice).LinearGradDGELU(dx, db, m.in(dt, s.R, s.Out), m.in(dt, s.Out, s.In), m.in(dt, s.R, s.In))
					return []*tensor.Tensor{dx, db}
				}})
		}
	}
	for i, c := range cases {
		f0, c0 := g.ltCounts()
		cuRunCase(t, g, c, uint64(3500+i))
		f1, c1 := g.ltCounts()
		t.Logf("%s: fused %d, composed %d", c.name, f1-f0, c1-c0)
		if mustFuse[i] && f1 == f0 {
			t.Errorf("%s: composed, not fused: cublasLt found no algorithm for a GPT-2-like shape", c.name)
		}
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after the epilogue tests, %d before: a leak\n%s", a, base, tensor.MemorySummary(g))
	}
}

// GODDP_BGRAD_EPI=0 makes LinearGradWB a plain GEMM and the column sums (composed, not fused, by
// the counters) with the CPU's results within tolerance, on a shape cublasLt does fuse by default
// (the A/B of session 19's profile: the BGRADB GEMMs ran slower than plain ones). Passed on an H100
// in session 19.
func TestCUDA_bgradEpilogueOffComposes(t *testing.T) {
	g := gpu(t)
	for _, off := range []bool{false, true} {
		t.Setenv("GODDP_BGRAD_EPI", map[bool]string{true: "0", false: ""}[off])
		for i, dt := range []tensor.DType{tensor.F32, tensor.F16} {
			c := cuOpCase{fmt.Sprintf("LinearGradWB/%s off=%v", dt, off), func(m *cuMaker) []*tensor.Tensor {
				dw, db := m.acc(tensor.F32, 512, 128), m.acc(tensor.F32, 512)
				m.dev.(tensor.EpilogueDevice).LinearGradWB(dw, db, m.in(dt, 64, 512), m.in(dt, 64, 128))
				return []*tensor.Tensor{dw, db}
			}}
			f0, c0 := g.ltCounts()
			cuRunCase(t, g, c, uint64(3600+i))
			f1, c1 := g.ltCounts()
			if fused := f1 > f0; fused == off || (c1 > c0) != off {
				t.Errorf("%s: fused %d, composed %d: want %s", c.name, f1-f0, c1-c0, map[bool]string{true: "composed", false: "fused"}[off])
			}
		}
	}
}

// GODDP_LT_GEMM=1 with GODDP_LT_TUNE=1 (lt_gemm.go, lt_tune.go; passed on an H100 in session 23): the op
// tests' plain MatMul cases (every dtype mix, transposes, beta 0 and 1, odd shapes) on a device
// of their own, the GEMMs through cublasLt and their algorithms timed at first use — within the
// same tolerance of the CPU, nothing left allocated, and cublasLt ran some of them (the counter).
func TestCUDA_ltGemmMatchesCPU(t *testing.T) {
	d := freshDevice(t, "GODDP_LT_GEMM", "1", "GODDP_LT_TUNE", "1")
	base := d.Stats().Allocated
	n := 0
	for i, c := range cuOpCases() {
		if strings.HasPrefix(c.name, "MatMul/") {
			cuRunCase(t, d, c, uint64(1000+i))
			n++
		}
	}
	d.Sync()
	if a := d.Stats().Allocated; a != base {
		t.Errorf("allocated %d after the GEMMs, %d before: a leak\n%s", a, base, tensor.MemorySummary(d))
	}
	if n == 0 || d.lt == nil || d.lt.Plain == 0 {
		t.Fatalf("%d MatMul cases, none through cublasLt", n)
	}
	t.Logf("%d MatMul cases: %d GEMMs through cublasLt, %d plans tuned", n, d.lt.Plain, d.lt.Tuned)
}
