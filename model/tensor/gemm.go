package tensor

import "fmt"

// gemm.go: the shape rules of Device.MatMul and Device.BatchedMatMul, which both devices follow
// (model/cpu/matmul.go, model/cuda/blas.go): one place decides what op(A)·op(B) means for
// row-major tensors, which shapes fit, and the leading dimensions and batch strides a GEMM
// routine wants.
//
//	C (M,N) = alpha·op(A) (M,K) · op(B) (K,N) + beta·C
//	op(A) = A (M,K) stored, or Aᵀ with A (K,M) stored (transA); the same for B
//
// MatMul reads every tensor as a matrix (MatDims: the leading dimensions are rows); BatchedMatMul
// wants 3-D tensors (batch, rows, cols) with one batch count and multiplies matrix by matrix.

// GEMM is one checked product's dimensions, repeated Batch times over contiguous row-major
// matrices.
type GEMM struct {
	M, N, K        int // C (M,N) = op(A) (M,K) · op(B) (K,N)
	Batch          int // 1 for MatMul
	TransA, TransB bool
	// ARows, ACols (and BRows, BCols) are one stored matrix of A (B) as it lies in memory:
	// (M,K) or, transposed, (K,M).
	ARows, ACols, BRows, BCols int
	// LDA, LDB, LDC are the leading dimensions (the row strides, in elements) of the stored A, B
	// and C: ACols, BCols and N.
	LDA, LDB, LDC int
	// StrideA, StrideB, StrideC are the elements from one matrix of the batch to the next: M·K,
	// K·N and M·N.
	StrideA, StrideB, StrideC int
}

// GEMMShape checks the shapes of C = op(A)·op(B) and returns the product's dimensions. With
// batched, a, b and c must be 3-D with one batch count (BatchedMatMul); without, each is read as
// a matrix (MatDims). A mismatch is an error saying which rule it breaks.
func GEMMShape(c, a, b []int, transA, transB, batched bool) (GEMM, error) {
	g := GEMM{Batch: 1, TransA: transA, TransB: transB}
	var cr, cc int
	if batched {
		if len(a) != 3 || len(b) != 3 || len(c) != 3 {
			return GEMM{}, fmt.Errorf("want 3-D tensors (batch, rows, cols), got C %v, A %v, B %v", c, a, b)
		}
		if a[0] != b[0] || a[0] != c[0] {
			return GEMM{}, fmt.Errorf("batch counts differ: C %d, A %d, B %d", c[0], a[0], b[0])
		}
		g.Batch = a[0]
		g.ARows, g.ACols = a[1], a[2]
		g.BRows, g.BCols = b[1], b[2]
		cr, cc = c[1], c[2]
	} else {
		g.ARows, g.ACols = matDims(a)
		g.BRows, g.BCols = matDims(b)
		cr, cc = matDims(c)
	}
	g.M, g.K = g.ARows, g.ACols
	if transA {
		g.M, g.K = g.ACols, g.ARows
	}
	k2 := g.BRows
	g.N = g.BCols
	if transB {
		k2, g.N = g.BCols, g.BRows
	}
	if g.K != k2 {
		return GEMM{}, fmt.Errorf("op(A) is (%d,%d) but op(B) is (%d,%d): inner dimensions differ", g.M, g.K, k2, g.N)
	}
	if cr != g.M || cc != g.N {
		return GEMM{}, fmt.Errorf("op(A)·op(B) is (%d,%d) but C is (%d,%d)", g.M, g.N, cr, cc)
	}
	g.LDA, g.LDB, g.LDC = g.ACols, g.BCols, g.N
	g.StrideA, g.StrideB, g.StrideC = g.M*g.K, g.K*g.N, g.M*g.N
	return g, nil
}

// CheckGEMM is GEMMShape of tensors for a device's MatMul (batched false) or BatchedMatMul
// (batched true); a mismatch is a programming error and panics naming op ("cpu: MatMul") and
// the tensors.
func CheckGEMM(op string, c, a, b *Tensor, transA, transB, batched bool) GEMM {
	g, err := GEMMShape(c.Shape(), a.Shape(), b.Shape(), transA, transB, batched)
	if err != nil {
		panic(fmt.Sprintf("%s shapes: C %s = op(A %s, trans=%v) · op(B %s, trans=%v): %v", op, c, a, transA, b, transB, err))
	}
	return g
}

// matDims is MatDims of a shape.
func matDims(shape []int) (int, int) {
	if len(shape) == 0 {
		return 1, 1
	}
	r := 1
	for _, d := range shape[:len(shape)-1] {
		r *= d
	}
	return r, shape[len(shape)-1]
}
