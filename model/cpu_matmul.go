package model

import "fmt"

// Matrix products on the CPU. Operands are first brought to row-major float32 (op(A) as M×K,
// op(B) as K×N; f16 widened, transposes packed), then gemmRows computes blocks of C rows in
// parallel. The kernel is gemmKernel (cpu_gemm*.go): four rows of C at a time so each loaded row
// of B serves four multiply-adds.

// matDims returns (rows, cols) of t seen as a matrix.
func matDims(t *Tensor) (int, int) { return t.Rows(), t.Cols() }

func (c *CPU) MatMul(C, A, B *Tensor, transA, transB bool, alpha, beta float32) {
	ar, ac := matDims(A)
	br, bc := matDims(B)
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	cr, cc := matDims(C)
	if k != k2 || cr != m || cc != n {
		panic(fmt.Sprintf("model: MatMul shapes: C %s = op(A %s, trans=%v) · op(B %s, trans=%v)", C, A, transA, B, transB))
	}
	a := packA(read(A), ar, ac, transA)
	b := packB(read(B), br, bc, transB)
	out := outBuf(C, beta != 0)
	c.gemm(m, n, k, a, b, out, alpha, beta)
	commit(C, out)
}

func (c *CPU) BatchedMatMul(C, A, B *Tensor, transA, transB bool, alpha, beta float32) {
	if len(A.shape) != 3 || len(B.shape) != 3 || len(C.shape) != 3 || A.shape[0] != B.shape[0] || A.shape[0] != C.shape[0] {
		panic(fmt.Sprintf("model: BatchedMatMul wants 3-D tensors with one batch count: C %s, A %s, B %s", C, A, B))
	}
	nb := A.shape[0]
	ar, ac := A.shape[1], A.shape[2]
	br, bc := B.shape[1], B.shape[2]
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	if k != k2 || C.shape[1] != m || C.shape[2] != n {
		panic(fmt.Sprintf("model: BatchedMatMul shapes: C %s = op(A %s, trans=%v) · op(B %s, trans=%v)", C, A, transA, B, transB))
	}
	as, bs := read(A), read(B)
	out := outBuf(C, beta != 0)
	sa, sb, sc := ar*ac, br*bc, m*n
	c.parallel(nb, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := packA(as[i*sa:(i+1)*sa], ar, ac, transA)
			b := packB(bs[i*sb:(i+1)*sb], br, bc, transB)
			gemmRows(m, n, k, a, b, out[i*sc:(i+1)*sc], alpha, beta, 0, m)
		}
	})
	commit(C, out)
}

// packA returns op(A) as a row-major M×K slice (A itself when no transpose is needed).
func packA(a []float32, rows, cols int, trans bool) []float32 {
	if !trans {
		return a
	}
	return transpose(a, rows, cols)
}

// packB returns op(B) as a row-major K×N slice.
func packB(b []float32, rows, cols int, trans bool) []float32 {
	if !trans {
		return b
	}
	return transpose(b, rows, cols)
}

// transpose returns the cols×rows transpose of the rows×cols matrix a, in 32×32 tiles.
func transpose(a []float32, rows, cols int) []float32 {
	t := make([]float32, len(a))
	const bs = 32
	for i0 := 0; i0 < rows; i0 += bs {
		for j0 := 0; j0 < cols; j0 += bs {
			for i := i0; i < min(i0+bs, rows); i++ {
				row := a[i*cols : (i+1)*cols]
				for j := j0; j < min(j0+bs, cols); j++ {
					t[j*rows+i] = row[j]
				}
			}
		}
	}
	return t
}

// gemm computes C = alpha·A·B + beta·C for row-major A (M×K), B (K×N), C (M×N), splitting C's rows
// across the threads.
func (c *CPU) gemm(m, n, k int, a, b, out []float32, alpha, beta float32) {
	grain := 4
	if work := n * k; work > 0 && work < 1<<16 {
		grain = max(4, (1<<16)/work*4)
	}
	c.parallel((m+3)/4, grain/4, func(lo, hi int) {
		gemmRows(m, n, k, a, b, out, alpha, beta, lo*4, min(hi*4, m))
	})
}

// gemmRows does rows [r0,r1) of C, blocking K so the B panel stays in cache.
func gemmRows(m, n, k int, a, b, out []float32, alpha, beta float32, r0, r1 int) {
	_ = m
	for i := r0; i < r1; i++ {
		row := out[i*n : (i+1)*n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
	const kb = 128
	const nb = 1024
	for j0 := 0; j0 < n; j0 += nb {
		j1 := min(j0+nb, n)
		for k0 := 0; k0 < k; k0 += kb {
			k1 := min(k0+kb, k)
			i := r0
			for ; i+4 <= r1; i += 4 {
				gemmKernel4(a, b, out, i, n, k, j0, j1, k0, k1, alpha)
			}
			for ; i < r1; i++ {
				gemmKernel1(a, b, out, i, n, k, j0, j1, k0, k1, alpha)
			}
		}
	}
}

// gemmKernel4: C[i..i+3][j0:j1] += alpha·A[i..i+3][k0:k1]·B[k0:k1][j0:j1].
func gemmKernel4(a, b, out []float32, i, n, k, j0, j1, k0, k1 int, alpha float32) {
	c0 := out[i*n+j0 : i*n+j1]
	c1 := out[(i+1)*n+j0 : (i+1)*n+j1]
	c2 := out[(i+2)*n+j0 : (i+2)*n+j1]
	c3 := out[(i+3)*n+j0 : (i+3)*n+j1]
	a0 := a[i*k : (i+1)*k]
	a1 := a[(i+1)*k : (i+2)*k]
	a2 := a[(i+2)*k : (i+3)*k]
	a3 := a[(i+3)*k : (i+4)*k]
	w := j1 - j0
	for p := k0; p < k1; p++ {
		x0, x1, x2, x3 := alpha*a0[p], alpha*a1[p], alpha*a2[p], alpha*a3[p]
		bp := b[p*n+j0 : p*n+j0+w]
		axpy4(bp, c0[:w], c1[:w], c2[:w], c3[:w], x0, x1, x2, x3)
	}
}

func gemmKernel1(a, b, out []float32, i, n, k, j0, j1, k0, k1 int, alpha float32) {
	c0 := out[i*n+j0 : i*n+j1]
	a0 := a[i*k : (i+1)*k]
	w := j1 - j0
	for p := k0; p < k1; p++ {
		x0 := alpha * a0[p]
		if x0 == 0 {
			continue
		}
		bp := b[p*n+j0 : p*n+j0+w]
		for j, v := range bp {
			c0[j] += x0 * v
		}
	}
}

// axpy4 is the inner loop: four rows of C take a multiple of one row of B.
func axpy4(bp, c0, c1, c2, c3 []float32, x0, x1, x2, x3 float32) {
	c0 = c0[:len(bp)]
	c1 = c1[:len(bp)]
	c2 = c2[:len(bp)]
	c3 = c3[:len(bp)]
	for j, v := range bp {
		c0[j] += x0 * v
		c1[j] += x1 * v
		c2[j] += x2 * v
		c3[j] += x3 * v
	}
}

func (c *CPU) AddBias(y, bias *Tensor) {
	r, cols := matDims(y)
	if bias.n != cols {
		panic(fmt.Sprintf("model: AddBias: %s has %d columns, bias %s", y, cols, bias))
	}
	bs := read(bias)
	ys := outBuf(y, true)
	c.parallel(r, 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := ys[i*cols : (i+1)*cols]
			for j := range row {
				row[j] += bs[j]
			}
		}
	})
	commit(y, ys)
}

func (c *CPU) BiasGrad(db, dy *Tensor) {
	r, cols := matDims(dy)
	if db.n != cols {
		panic(fmt.Sprintf("model: BiasGrad: %s has %d columns, db %s", dy, cols, db))
	}
	ds := read(dy)
	acc := make([]float64, cols)
	for i := 0; i < r; i++ {
		row := ds[i*cols : (i+1)*cols]
		for j, v := range row {
			acc[j] += float64(v)
		}
	}
	out := outBuf(db, true)
	for j := range out {
		out[j] += float32(acc[j])
	}
	commit(db, out)
}
