//go:build cuda

package cuda

import (
	"github.com/goddp/goddp/model/cuda/cublaslt"
	"github.com/goddp/goddp/model/tensor"
)

// lt_gemm.go: the device's plain GEMMs (MatMul, batch 1) through cublasLt with the default
// epilogue instead of cublasGemmEx (the default since session 23; GODDP_LT_GEMM=0 keeps
// cublasGemmEx), so that the tuner (GODDP_LT_TUNE, lt_tune.go) chooses their algorithms by timing
// too: the GEMMs of GPT-2 small's step at b16 are ~20 ms of its ~37, at 650–690 TFLOP/s on an
// H100, and with the tuner the step measured −0.58 ms at b16 there (session 23). Operands
// cublasLt does not take (the dtypes of ltDType, mixed 16-bit types after gemm's widening) stay
// on cublasGemmEx.

// ltGemm runs C (out) = alpha·op(A)·op(B) + beta·C (row-major, gemm's arguments) through
// cublasLt unless GODDP_LT_GEMM=0, where it can, and reports whether it did (false: nothing
// enqueued, the caller runs cublasGemmEx).
func (d *Device) ltGemm(out, a, b *tensor.Tensor, transA, transB bool, m, n, k, lda, ldb, ldc int, alpha, beta float32) bool {
	if !ltGemmOn() || !ltSameDType(a, b) {
		return false
	}
	if _, ok := ltDType(out); !ok {
		return false
	}
	// Row-major to column-major as gemm's cublasGemmEx call: Cᵀ (N,M) = op(B)ᵀ·op(A)ᵀ.
	p := cublaslt.Plan{Epilogue: cublaslt.EpiDefault, TransA: transB, TransB: transA, M: n, N: m, K: k,
		ADT: int(b.DType()), BDT: int(a.DType()), DDT: int(out.DType()), BiasDT: -1,
		LDA: ldb, LDB: lda, LDD: ldc}
	if !d.ltRun(p, alpha, beta, b, a, out) {
		return false
	}
	d.lt.Plain++
	return true
}
