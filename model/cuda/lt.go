//go:build cuda

package cuda

import (
	"fmt"

	"github.com/goddp/goddp/model/cuda/cublaslt"
	"github.com/goddp/goddp/model/tensor"
)

// lt.go: the device's tensor.EpilogueDevice through cublasLt (model/cuda/cublaslt; issue 35):
// a Linear's bias add, its GELU and its bias gradient in the GEMM's epilogue instead of the
// separate k_addbias, k_gelu, k_gelu_bwd and bias-gradient kernels. The model uses it under
// model.gemm_epilogue (GPTConfig.GemmEpilogue; ran on an H100 in session 11: no faster), and its
// bias-only part by default (tensor.BiasEpiloguer; GODDP_BIAS_EPILOGUE=0 turns it off; the default
// since session 19's whole suite on an H100: −0.8 ms at b16).
//
// Row-major to column-major as gemm (blas.go): C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ,
// so cublasLt's D is the row-major output read as (cols, rows), its "m" the output's columns:
// a bias broadcast along cublasLt's rows is a bias per output column, as AddBias's.
//
// A case cublasLt has no algorithm for (a dtype mix, an odd leading dimension of the GELU's
// auxiliary output, a bias or auxiliary address not 16-byte aligned; the heuristic is told the
// alignment of the operands' addresses, which need not be the 256 bytes it assumes by default) is
// composed of the device's separate operations instead (tensor.ComposeLinearBias and the
// others); ltState counts both, so the tests can tell which ran. The bias gradients cublasLt
// writes are not accumulated, so they land in a temporary (C) vector added to db (Axpy).

var _ tensor.EpilogueDevice = (*Device)(nil)

// BiasEpilogues is tensor.BiasEpiloguer's switch: on unless GODDP_BIAS_EPILOGUE=0 (env.go).
func (d *Device) BiasEpilogues() bool { return biasEpilogue() }

var _ tensor.BiasEpiloguer = (*Device)(nil)

// ltWorkspace is the workspace cublasLt may use per matmul (32 MiB, as NVIDIA recommends for
// Hopper), taken from the device's cache for the call and given back after it.
const ltWorkspace = 32 << 20

type ltState struct {
	h     *cublaslt.Handle
	algos map[cublaslt.Plan]ltAlgo // by plan without addresses
	// Fused and Composed count the epilogue calls cublasLt ran and the calls composed instead;
	// Plain the plain GEMMs it ran (lt_gemm.go; blas.go); Tuned the plans whose algorithm the
	// tuner chose by timing, now or in an earlier run on this GPU model (lt_tune.go).
	Fused, Composed, Plain, Tuned int
}

type ltAlgo struct {
	a  cublaslt.Algo
	ok bool
}

func (d *Device) closeLt() {
	if d.lt != nil && d.lt.h != nil {
		d.lt.h.Destroy()
	}
	d.lt = nil
}

// ltCounts reports how many epilogue calls ran fused and how many were composed (tests).
func (d *Device) ltCounts() (fused, composed int) {
	if d.lt == nil {
		return 0, 0
	}
	return d.lt.Fused, d.lt.Composed
}

// ltRun enqueues p on D = alpha·op(A)·op(B) + beta·D (column-major operands as Plan says) and
// reports whether it did: false (nothing enqueued) when cublasLt has no algorithm for p or the
// bias's or auxiliary output's address is not 16-byte aligned.
func (d *Device) ltRun(p cublaslt.Plan, alpha, beta float32, a, b, out *tensor.Tensor) bool {
	if d.lt == nil {
		d.lt = &ltState{algos: map[cublaslt.Plan]ltAlgo{}}
	}
	s := d.lt
	for _, ptr := range []uint64{p.Bias, p.Aux} {
		if ptr%16 != 0 {
			return false
		}
	}
	p.AlignA, p.AlignB, p.AlignD = ltAlign(dptr(a)), ltAlign(dptr(b)), ltAlign(dptr(out))
	key := p // the cache's key: the plan without its addresses (bias and aux are 16-byte aligned, A, B, D's alignments are in it)
	key.Bias, key.Aux = 0, 0
	al, seen := s.algos[key]
	if s.h == nil || !seen {
		d.enter()
		if s.h == nil {
			h, err := cublaslt.New()
			if err != nil {
				d.leave()
				panic(fmt.Sprintf("cuda: %v", err))
			}
			s.h = h
		}
		var err error
		al.a, al.ok, err = s.h.Algo(&p, ltWorkspace) // with the addresses set, as the matmul will be
		d.leave()
		if err != nil {
			panic(fmt.Sprintf("cuda: %v", err))
		}
		if ltTune() { // timed among the heuristic's candidates unless GODDP_LT_TUNE=0 (lt_tune.go)
			al.a = d.ltTuneAlgo(&p, alpha, beta, a, b, out, al.a, al.ok)
		}
		s.algos[key] = al
	}
	if !al.ok {
		return false
	}
	ws := d.Alloc(tensor.F32, "cublaslt.workspace", ltWorkspace/4)
	d.enter()
	end := d.profBegin(fmt.Sprintf("lt epi%d %dx%dx%d %s>%s", p.Epilogue, p.M, p.N, p.K, a.DType(), out.DType()))
	err := s.h.Matmul(&p, al.a, alpha, beta, dptr(a), dptr(b), dptr(out), dptr(ws), ltWorkspace, d.stream.Ptr())
	end()
	d.leave()
	d.Free(ws)
	if err != nil {
		panic(fmt.Sprintf("cuda: %v", err))
	}
	return true
}

// ltFused is ltRun for the epilogue calls, which it counts (ltState.Fused).
func (d *Device) ltFused(p cublaslt.Plan, alpha, beta float32, a, b, out *tensor.Tensor) bool {
	if !d.ltRun(p, alpha, beta, a, b, out) {
		return false
	}
	d.lt.Fused++
	return true
}

// ltAlign is the power of two, at most 256, that ptr is a multiple of.
func ltAlign(ptr uint64) int {
	a := 256
	for a > 1 && ptr%uint64(a) != 0 {
		a /= 2
	}
	return a
}

// ltDType is t's dtype code for cublasLt, and whether cublasLt takes it (f32, f16, bf16).
func ltDType(t *tensor.Tensor) (int, bool) {
	switch t.DType() {
	case tensor.F32, tensor.F16, tensor.BF16:
		return int(t.DType()), true
	}
	return 0, false
}

// ltSameDType reports whether every tensor has one dtype cublasLt takes.
func ltSameDType(ts ...*tensor.Tensor) bool {
	if _, ok := ltDType(ts[0]); !ok {
		return false
	}
	for _, t := range ts[1:] {
		if t.DType() != ts[0].DType() {
			return false
		}
	}
	return true
}

func (d *Device) composed() {
	if d.lt == nil {
		d.lt = &ltState{algos: map[cublaslt.Plan]ltAlgo{}}
	}
	d.lt.Composed++
}

// forwardPlan is y (R,Out) = x (R,In)·wᵀ with the epilogue epi, column-major: D (Out,R) =
// op(w)·x, w transposed.
func forwardPlan(op string, epi int, y, x, w, b *tensor.Tensor) cublaslt.Plan {
	g := tensor.CheckGEMM(op, y, x, w, false, true, false)
	if b.Len() != g.N {
		panic(fmt.Sprintf("%s: bias %s for %d output columns", op, b, g.N))
	}
	return cublaslt.Plan{Epilogue: epi, TransA: true, TransB: false, M: g.N, N: g.M, K: g.K,
		ADT: int(w.DType()), BDT: int(x.DType()), DDT: int(y.DType()), BiasDT: int(b.DType()),
		LDA: g.LDB, LDB: g.LDA, LDD: g.LDC, Bias: dptr(b)}
}

func (d *Device) LinearBias(y, x, w, b *tensor.Tensor) {
	p := forwardPlan("cuda: LinearBias", cublaslt.EpiBias, y, x, w, b)
	if p.M == 0 || p.N == 0 || p.K == 0 || !ltSameDType(y, x, w) || !ltFloat(b) || !d.ltFused(p, 1, 0, w, x, y) {
		d.composed()
		tensor.ComposeLinearBias(d, y, x, w, b)
	}
}

func (d *Device) LinearBiasGELU(y, pre, x, w, b *tensor.Tensor) {
	p := forwardPlan("cuda: LinearBiasGELU", cublaslt.EpiGELUAuxBias, y, x, w, b)
	tensor.CheckLen("cuda: LinearBiasGELU", y, pre)
	p.Aux, p.AuxLD = dptr(pre), p.M
	if p.M == 0 || p.N == 0 || p.K == 0 || !ltSameDType(y, pre, x, w) || !ltFloat(b) || !d.ltFused(p, 1, 0, w, x, y) {
		d.composed()
		tensor.ComposeLinearBiasGELU(d, y, pre, x, w, b)
	}
}

func (d *Device) LinearGradWB(dw, db, dy, x *tensor.Tensor) {
	g := tensor.CheckGEMM("cuda: LinearGradWB", dw, dy, x, true, false, false) // (Out,In) = dyᵀ·x
	if db.Len() != g.M || db.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: LinearGradWB: db %s for %d output columns, want f32", db, g.M))
	}
	// Column-major: D (In,Out) = x (In,R) · op(dy) with dy stored (Out,R) transposed; the bias
	// gradient sums op(dy) over K = R: Out entries.
	if g.M > 0 && g.N > 0 && g.K > 0 && ltSameDType(dy, x) && dw.DType() == tensor.F32 && bgradEpilogue() {
		tmp := d.Alloc(tensor.F32, "cublaslt.dbias", g.M)
		p := cublaslt.Plan{Epilogue: cublaslt.EpiBGradB, TransA: false, TransB: true, M: g.N, N: g.M, K: g.K,
			ADT: int(x.DType()), BDT: int(dy.DType()), DDT: int(tensor.F32), BiasDT: int(tensor.F32),
			LDA: g.LDB, LDB: g.LDA, LDD: g.LDC, Bias: dptr(tmp)}
		ok := d.ltFused(p, 1, 1, x, dy, dw)
		if ok {
			d.Axpy(db, 1, tmp)
		}
		d.Free(tmp)
		if ok {
			return
		}
	}
	d.composed()
	tensor.ComposeLinearGradWB(d, dw, db, dy, x)
}

func (d *Device) LinearGradDGELU(dx, db, dy, w, pre *tensor.Tensor) {
	g := tensor.CheckGEMM("cuda: LinearGradDGELU", dx, dy, w, false, false, false) // (R,In) = dy·w
	tensor.CheckLen("cuda: LinearGradDGELU", dx, pre)
	if db.Len() != g.N || db.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: LinearGradDGELU: db %s for %d input columns, want f32", db, g.N))
	}
	// Column-major: D (In,R) = w (In,Out) · dy (Out,R), GELU'(pre) applied, the bias gradient
	// summed over R: In entries. An f32 bias gradient first, then dx's dtype (cublasLt's default).
	if g.M > 0 && g.N > 0 && g.K > 0 && ltSameDType(dx, dy, w, pre) {
		for _, bdt := range []tensor.DType{tensor.F32, dx.DType()} {
			tmp := d.Alloc(bdt, "cublaslt.dbias", g.N)
			p := cublaslt.Plan{Epilogue: cublaslt.EpiDGELUBGrad, M: g.N, N: g.M, K: g.K,
				ADT: int(w.DType()), BDT: int(dy.DType()), DDT: int(dx.DType()), BiasDT: int(bdt),
				LDA: g.LDB, LDB: g.LDA, LDD: g.LDC, Bias: dptr(tmp), Aux: dptr(pre), AuxLD: g.LDC}
			ok := d.ltFused(p, 1, 0, w, dy, dx)
			if ok {
				d.Axpy(db, 1, tmp)
			}
			d.Free(tmp)
			if ok {
				return
			}
			if bdt == dx.DType() {
				break
			}
		}
	}
	d.composed()
	tensor.ComposeLinearGradDGELU(d, dx, db, dy, w, pre)
}

// ltFloat reports whether a bias's dtype is one cublasLt takes.
func ltFloat(t *tensor.Tensor) bool {
	_, ok := ltDType(t)
	return ok
}
