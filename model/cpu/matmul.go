package cpu

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Matrix products on the CPU: shapes are checked here, the work is the packed, blocked SGEMM of
// gemm.go (f16 operands are widened while packing; an f16 C goes through a pooled f32 scratch).

func (c *Device) MatMul(C, A, B *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	ar, ac := tensor.MatDims(A)
	br, bc := tensor.MatDims(B)
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	cr, cc := tensor.MatDims(C)
	if k != k2 || cr != m || cc != n {
		panic(fmt.Sprintf("cpu: MatMul shapes: C %s = op(A %s, trans=%v) · op(B %s, trans=%v)", C, A, transA, B, transB))
	}
	out, done := gemmOut(C, beta != 0)
	c.gemm(m, n, k, gemmOperand(A, 0, ar, ac, transA), gemmOperand(B, 0, br, bc, transB), out, alpha, beta)
	done()
}

func (c *Device) BatchedMatMul(C, A, B *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	if len(A.Shape()) != 3 || len(B.Shape()) != 3 || len(C.Shape()) != 3 || A.Shape()[0] != B.Shape()[0] || A.Shape()[0] != C.Shape()[0] {
		panic(fmt.Sprintf("cpu: BatchedMatMul wants 3-D tensors with one batch count: C %s, A %s, B %s", C, A, B))
	}
	nb := A.Shape()[0]
	ar, ac := A.Shape()[1], A.Shape()[2]
	br, bc := B.Shape()[1], B.Shape()[2]
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	if k != k2 || C.Shape()[1] != m || C.Shape()[2] != n {
		panic(fmt.Sprintf("cpu: BatchedMatMul shapes: C %s = op(A %s, trans=%v) · op(B %s, trans=%v)", C, A, transA, B, transB))
	}
	out, done := gemmOut(C, beta != 0)
	sa, sb, sc := ar*ac, br*bc, m*n
	if nb < c.threads || nb*m*n*k < 1<<17 {
		// Few batches (or tiny ones): each product uses all the threads (or just this one).
		for i := 0; i < nb; i++ {
			c.gemm(m, n, k, gemmOperand(A, i*sa, ar, ac, transA), gemmOperand(B, i*sb, br, bc, transB), out[i*sc:(i+1)*sc], alpha, beta)
		}
		done()
		return
	}
	c.parallel(nb, 1, func(lo, hi int) {
		w := gemmPool.Get().(*gemmWS)
		for i := lo; i < hi; i++ {
			w.gemm(0, m, 0, n, k, gemmOperand(A, i*sa, ar, ac, transA), gemmOperand(B, i*sb, br, bc, transB), out[i*sc:(i+1)*sc], n, alpha, beta)
		}
		gemmPool.Put(w)
	})
	done()
}

func (c *Device) AddBias(y, bias *tensor.Tensor) {
	r, cols := tensor.MatDims(y)
	if bias.Len() != cols {
		panic(fmt.Sprintf("cpu: AddBias: %s has %d columns, bias %s", y, cols, bias))
	}
	bs := read(bias)[:cols]
	ys := outBuf(y, true)
	c.parallel(r, max(1, (1<<14)/max(cols, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := ys[i*cols : (i+1)*cols]
			row = row[:len(bs)]
			for j, b := range bs {
				row[j] += b
			}
		}
	})
	commit(y, ys)
}

func (c *Device) BiasGrad(db, dy *tensor.Tensor) {
	r, cols := tensor.MatDims(dy)
	if db.Len() != cols {
		panic(fmt.Sprintf("cpu: BiasGrad: %s has %d columns, db %s", dy, cols, db))
	}
	ds := read(dy)
	out := outBuf(db, true)
	// Columns are independent: split them across threads, summing each in float64 down the rows
	// (in 64-column strips so the accumulators stay in registers/L1).
	c.parallel(cols, max(64, (1<<15)/max(r, 1)), func(lo, hi int) {
		var acc [64]float64
		for j0 := lo; j0 < hi; j0 += 64 {
			j1 := min(j0+64, hi)
			a := acc[:j1-j0]
			clear(a)
			for i := 0; i < r; i++ {
				row := ds[i*cols+j0 : i*cols+j1]
				row = row[:len(a)]
				for j, v := range row {
					a[j] += float64(v)
				}
			}
			for j, v := range a {
				out[j0+j] += float32(v)
			}
		}
	})
	commit(db, out)
}
