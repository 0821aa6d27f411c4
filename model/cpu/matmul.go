package cpu

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Matrix products on the CPU: shapes are checked here, the work is the packed, blocked SGEMM of
// gemm.go (f16 operands are widened while packing; an f16 C goes through a pooled f32 scratch).

// MatMul and BatchedMatMul: shapes by tensor.CheckGEMM (the rules both devices share).
func (c *Device) MatMul(C, A, B *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	g := tensor.CheckGEMM("cpu: MatMul", C, A, B, transA, transB, false)
	out, done := gemmOut(C, beta != 0)
	c.gemm(g.M, g.N, g.K, gemmOperand(A, 0, g.ARows, g.ACols, transA), gemmOperand(B, 0, g.BRows, g.BCols, transB), out, alpha, beta)
	done()
}

func (c *Device) BatchedMatMul(C, A, B *tensor.Tensor, transA, transB bool, alpha, beta float32) {
	g := tensor.CheckGEMM("cpu: BatchedMatMul", C, A, B, transA, transB, true)
	out, done := gemmOut(C, beta != 0)
	nb, m, n, k := g.Batch, g.M, g.N, g.K
	sa, sb, sc := g.StrideA, g.StrideB, g.StrideC
	operands := func(i int) (gemmSrc, gemmSrc) {
		return gemmOperand(A, i*sa, g.ARows, g.ACols, transA), gemmOperand(B, i*sb, g.BRows, g.BCols, transB)
	}
	if nb < c.threads || nb*m*n*k < 1<<17 {
		// Few batches (or tiny ones): each product uses all the threads (or just this one).
		for i := 0; i < nb; i++ {
			a, b := operands(i)
			c.gemm(m, n, k, a, b, out[i*sc:(i+1)*sc], alpha, beta)
		}
		done()
		return
	}
	c.parallel(nb, 1, func(lo, hi int) {
		w := gemmPool.Get().(*gemmWS)
		for i := lo; i < hi; i++ {
			a, b := operands(i)
			w.gemm(0, m, 0, n, k, a, b, out[i*sc:(i+1)*sc], n, alpha, beta)
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
