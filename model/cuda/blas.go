//go:build cuda

package cuda

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// gemmDims checks shapes and returns m, n, k of C (M,N) = op(A) (M,K) · op(B) (K,N).
func gemmDims(op string, c, a, b [2]int, transA, transB bool) (m, n, k int) {
	m, k = a[0], a[1]
	if transA {
		m, k = a[1], a[0]
	}
	k2, n := b[0], b[1]
	if transB {
		k2, n = b[1], b[0]
	}
	if k != k2 || c[0] != m || c[1] != n {
		panic(fmt.Sprintf("cuda: %s shapes: C %v = op(A %v, trans=%v) · op(B %v, trans=%v)", op, c, a, transA, b, transB))
	}
	return
}

func (d *Device) MatMul(c, a, b *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	ar, ac := tensor.MatDims(a)
	br, bc := tensor.MatDims(b)
	cr, cc := tensor.MatDims(c)
	m, n, k := gemmDims("MatMul", [2]int{cr, cc}, [2]int{ar, ac}, [2]int{br, bc}, transA, transB)
	d.gemm(c, a, b, m, n, k, 1, transA, transB, alpha, beta)
}

func (d *Device) BatchedMatMul(c, a, b *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	if len(a.Shape()) != 3 || len(b.Shape()) != 3 || len(c.Shape()) != 3 || a.Shape()[0] != b.Shape()[0] || a.Shape()[0] != c.Shape()[0] {
		panic(fmt.Sprintf("cuda: BatchedMatMul wants 3-D tensors with one batch count: C %s, A %s, B %s", c, a, b))
	}
	m, n, k := gemmDims("BatchedMatMul", [2]int{c.Shape()[1], c.Shape()[2]}, [2]int{a.Shape()[1], a.Shape()[2]},
		[2]int{b.Shape()[1], b.Shape()[2]}, transA, transB)
	d.gemm(c, a, b, m, n, k, a.Shape()[0], transA, transB, alpha, beta)
}

// gemm runs batch row-major products. cuBLAS is column-major, and a row-major (R,C) matrix is a
// column-major (C,R) one, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap
// and each keeps its own transpose flag. Supported operand mixes go straight to cuBLAS (A and B of
// one dtype; f16·f16 into f16 or f32; f32·f32 into f32); others widen through f32 temporaries.
func (d *Device) gemm(c, a, b *tensor.Tensor, m, n, k, batch int, transA, transB bool, alpha, beta float32) {
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
	if a.DType() != b.DType() {
		if a.DType() == tensor.F16 {
			a = widen(a)
		} else {
			b = widen(b)
		}
	}
	out := c
	if c.DType() == tensor.F16 && a.DType() == tensor.F32 {
		out = d.Alloc(tensor.F32, "cuda.gemm.out", c.Len())
		tmps = append(tmps, out)
		if beta != 0 {
			d.Copy(out, c)
		}
	}
	if k == 0 { // C = beta·C
		d.Scale(out, beta)
	} else {
		lda := k // A stored (M,K)
		if transA {
			lda = m // stored (K,M)
		}
		ldb := n // B stored (K,N)
		if transB {
			ldb = k // stored (N,K)
		}
		d.enter()
		end := d.profBegin(fmt.Sprintf("gemm %dx%dx%d b%d %s%s>%s t%v%v", m, n, k, batch, a.DType(), b.DType(), out.DType(), cbit(transA), cbit(transB)))
		var err error
		if batch == 1 {
			err = d.blas.Gemm(transB, transA, n, m, k, alpha, dptr(b), int(b.DType()), ldb, dptr(a), int(a.DType()), lda,
				beta, dptr(out), int(out.DType()), n)
		} else {
			err = d.blas.GemmStridedBatched(transB, transA, n, m, k, alpha, dptr(b), int(b.DType()), ldb, int64(k*n),
				dptr(a), int(a.DType()), lda, int64(m*k), beta, dptr(out), int(out.DType()), n, int64(m*n), batch)
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
