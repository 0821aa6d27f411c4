//go:build cuda

package cuda

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// MatMul and BatchedMatMul: shapes by tensor.CheckGEMM (the rules both devices share).
func (d *Device) MatMul(c, a, b *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	d.gemm(c, a, b, tensor.CheckGEMM("cuda: MatMul", c, a, b, transA, transB, false), alpha, beta)
}

func (d *Device) BatchedMatMul(c, a, b *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	d.gemm(c, a, b, tensor.CheckGEMM("cuda: BatchedMatMul", c, a, b, transA, transB, true), alpha, beta)
}

// gemm runs batch row-major products. cuBLAS is column-major, and a row-major (R,C) matrix is a
// column-major (C,R) one, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap
// and each keeps its own transpose flag. Supported operand mixes go straight to cuBLAS (A and B of
// one dtype; f16·f16 into f16 or f32; bf16·bf16 into bf16 or f32; f32·f32 into f32); others widen
// through f32 temporaries.
func (d *Device) gemm(c, a, b *tensor.Tensor, g tensor.GEMM, alpha, beta float32) {
	m, n, k, batch, transA, transB := g.M, g.N, g.K, g.Batch, g.TransA, g.TransB
	if a.DType() == tensor.I32 || b.DType() == tensor.I32 || c.DType() == tensor.I32 {
		panic(fmt.Sprintf("cuda: MatMul of integer tensors: C %s, A %s, B %s", c, a, b))
	}
	if m == 0 || n == 0 {
		return
	}
	var tmps []*tensor.Tensor
	defer func() {
		for _, t := range tmps {
			d.Free(t)
		}
	}()
	widen := func(t *tensor.Tensor) *tensor.Tensor {
		w := d.Alloc(tensor.F32, "cuda.gemm.widen", t.Len())
		d.Copy(w, t)
		tmps = append(tmps, w)
		return w
	}
	if a.DType() != b.DType() { // widen each 16-bit operand (f16·bf16 widens both)
		if a.DType().Half() {
			a = widen(a)
		}
		if b.DType().Half() {
			b = widen(b)
		}
	}
	out := c
	if c.DType().Half() && a.DType() != c.DType() { // f32·f32, or the other 16-bit type, into 16 bits: through f32
		out = d.Alloc(tensor.F32, "cuda.gemm.out", c.Len())
		tmps = append(tmps, out)
		if beta != 0 {
			d.Copy(out, c)
		}
	}
	if k == 0 { // C = beta·C
		d.Scale(out, beta)
	} else {
		lda, ldb, ldc := g.LDA, g.LDB, g.LDC // A stored (M,K) or (K,M), B (K,N) or (N,K), C (M,N)
		if batch == 1 && d.ltGemm(out, a, b, transA, transB, m, n, k, lda, ldb, ldc, alpha, beta) {
			if out != c {
				d.Copy(c, out)
			}
			return
		}
		d.enter()
		end := d.profBegin(fmt.Sprintf("gemm %dx%dx%d b%d %s%s>%s t%v%v", m, n, k, batch, a.DType(), b.DType(), out.DType(), cbit(transA), cbit(transB)))
		var err error
		if batch == 1 {
			err = d.blas.Gemm(transB, transA, n, m, k, alpha, dptr(b), int(b.DType()), ldb, dptr(a), int(a.DType()), lda,
				beta, dptr(out), int(out.DType()), ldc)
		} else {
			err = d.blas.GemmStridedBatched(transB, transA, n, m, k, alpha, dptr(b), int(b.DType()), ldb, int64(g.StrideB),
				dptr(a), int(a.DType()), lda, int64(g.StrideA), beta, dptr(out), int(out.DType()), ldc, int64(g.StrideC), batch)
		}
		end()
		d.leave()
		if err != nil {
			panic(fmt.Sprintf("cuda: %v (%s, %s → %s)", err, a.DType(), b.DType(), out.DType()))
		}
	}
	if out != c {
		d.Copy(c, out)
	}
}

func cbit(b bool) int {
	if b {
		return 1
	}
	return 0
}
