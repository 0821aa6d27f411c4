package cpu

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// The CPU's SGEMM, organised like BLIS/GotoBLAS:
//
//	for jc over N in NC columns          (one thread's share of N, or all of it)
//	  for pc over K in KC steps          pack op(B)[pc:pc+kc, jc:jc+nc] into NR-wide panels
//	    for ic over M in MC rows         pack op(A)[ic:ic+mc, pc:pc+kc] into MR-tall panels
//	      for jr over nc in NR           one B micro-panel (kc×NR) stays in L1
//	        for ir over mc in MR         micro-kernel: C[MR×NR] = alpha·Apanel·Bpanel + beta·C
//
// Transposes and f16 widening happen in the packing, so operands are read where they lie. The
// micro-kernel is AVX-512 or AVX2+FMA assembly where the CPU has it (gemm_amd64.s) and plain
// Go elsewhere; edge tiles go through a zero-padded MR×NR scratch tile. Threads: a C at least as
// wide as tall packs op(A) once, shared, and the threads take column chunks as they go
// (gemmSharedA); a taller C is split by rows, each thread running the whole loop nest on its part
// with its own packing buffers. docs/perf-cpu.md has the numbers.

const (
	gemmMR = 12   // rows of a micro-tile
	gemmNR = 32   // columns of a micro-tile (two 16-wide AVX-512 vectors)
	gemmKC = 256  // depth of a packed block: a B micro-panel is kc·NR·4 = 32 KiB (L1)
	gemmMC = 144  // rows of a packed A block: 144·256·4 = 144 KiB (L2)
	gemmNC = 2048 // columns of a packed B block
)

// gemmSrc is an operand seen as op(X): element (i, j) is at off + i*rs + j*cs of f32 (or, when
// f32 is nil, of the 16-bit floats in f16, of format hf: f16 or bf16).
type gemmSrc struct {
	f32    []float32
	f16    []uint16
	hf     half.Format
	off    int
	rs, cs int
}

// gemmOperand describes op(t) for a matrix t of rows×cols elements starting at element off of t.
func gemmOperand(t *tensor.Tensor, off, rows, cols int, trans bool) gemmSrc {
	s := gemmSrc{off: off, rs: cols, cs: 1}
	if trans {
		s.rs, s.cs = 1, cols
	}
	switch d := t.DType(); {
	case d == tensor.F32:
		s.f32 = f32s(t)
	case isHalf(d):
		s.f16, s.hf = h16s(t), formatOf(d)
	default:
		panic("cpu: MatMul of " + t.String())
	}
	return s
}

// gemmWS is one thread's packing buffers, reused through gemmPool.
type gemmWS struct {
	a    []float32
	b    []float32
	tile [gemmMR * gemmNR]float32
}

var gemmPool = sync.Pool{New: func() any { return new(gemmWS) }}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// gemmKernel computes the MR×NR tile C = alpha·A·B + beta·C from packed panels a (k×MR) and
// b (k×NR); c has row stride ldc. beta == 0 never reads C.
type gemmKernel func(k int, a, b, c *float32, ldc int, alpha, beta float32)

// gemmKern is the micro-kernel in use (set by gemm_amd64.go when the CPU allows).
var gemmKern gemmKernel = gemmKernGo

// gemm computes C[m0:m1, n0:n1] = alpha·op(A)·op(B) + beta·C on one thread; C is row-major with
// row stride ldc, op(A) is M×k, op(B) is k×N.
func (w *gemmWS) gemm(m0, m1, n0, n1, k int, A, B gemmSrc, C []float32, ldc int, alpha, beta float32) {
	if m0 >= m1 || n0 >= n1 {
		return
	}
	if k == 0 {
		for i := m0; i < m1; i++ {
			row := C[i*ldc+n0 : i*ldc+n1]
			if beta == 0 {
				clear(row)
			} else {
				for j := range row {
					row[j] *= beta
				}
			}
		}
		return
	}
	kern := gemmKern
	for jc := n0; jc < n1; jc += gemmNC {
		nc := min(gemmNC, n1-jc)
		ncp := (nc + gemmNR - 1) / gemmNR * gemmNR
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			w.b = grow(w.b, kc*ncp)
			packB(w.b, B, pc, kc, jc, nc)
			bet := beta
			if pc > 0 {
				bet = 1
			}
			for ic := m0; ic < m1; ic += gemmMC {
				mc := min(gemmMC, m1-ic)
				mcp := (mc + gemmMR - 1) / gemmMR * gemmMR
				w.a = grow(w.a, kc*mcp)
				packA(w.a, A, ic, mc, pc, kc)
				w.macro(kern, kc, w.a, mc, w.b, nc, C, ic*ldc+jc, ldc, alpha, bet)
			}
		}
	}
}

// macro runs the micro-kernel over packed a (mc rows) and b (nc columns) of depth kc into C from
// element c0 with row stride ldc; edge tiles go through w.tile.
func (w *gemmWS) macro(kern gemmKernel, kc int, a []float32, mc int, b []float32, nc int, C []float32, c0, ldc int, alpha, bet float32) {
	for jr := 0; jr < nc; jr += gemmNR {
		bp := &b[jr*kc]
		cols := min(gemmNR, nc-jr)
		for ir := 0; ir < mc; ir += gemmMR {
			ap := &a[ir*kc]
			rows := min(gemmMR, mc-ir)
			ci := c0 + ir*ldc + jr
			if rows == gemmMR && cols == gemmNR {
				kern(kc, ap, bp, &C[ci], ldc, alpha, bet)
				continue
			}
			t := &w.tile
			kern(kc, ap, bp, &t[0], gemmNR, alpha, 0)
			for r := 0; r < rows; r++ {
				dst := C[ci+r*ldc : ci+r*ldc+cols]
				src := t[r*gemmNR : r*gemmNR+cols]
				if bet == 0 {
					copy(dst, src)
				} else {
					for j, v := range src {
						dst[j] = v + bet*dst[j]
					}
				}
			}
		}
	}
}

// packA packs op(A)[i0:i0+mc, p0:p0+kc] into MR-row panels: panel q holds rows q·MR.. as
// dst[q·MR·kc + p·MR + r], rows past mc zero.
func packA(dst []float32, s gemmSrc, i0, mc, p0, kc int) {
	for ir := 0; ir < mc; ir += gemmMR {
		rows := min(gemmMR, mc-ir)
		d := dst[ir*kc : ir*kc+gemmMR*kc]
		if s.cs == 1 {
			// Rows of op(A) are contiguous: read each row, write with stride MR.
			r := 0
			if s.f32 != nil && rows >= 8 {
				// Two overlapping groups of 8 rows (0..7 and rows-8..rows-1) cover 8 to 12 rows;
				// the overlap is written twice with the same values.
				transpose8(d, s.f32[s.off+(i0+ir)*s.rs+p0:], s.rs, gemmMR, kc)
				transpose8(d[rows-8:], s.f32[s.off+(i0+ir+rows-8)*s.rs+p0:], s.rs, gemmMR, kc)
				r = rows
			}
			for ; r < rows; r++ {
				base := s.off + (i0+ir+r)*s.rs + p0
				if s.f32 != nil {
					src := s.f32[base : base+kc]
					for p, v := range src {
						d[p*gemmMR+r] = v
					}
				} else {
					src := s.f16[base : base+kc]
					t := s.hf.Table()
					for p, h := range src {
						d[p*gemmMR+r] = t[h]
					}
				}
			}
			if rows < gemmMR {
				for p := 0; p < kc; p++ {
					clear(d[p*gemmMR+rows : (p+1)*gemmMR])
				}
			}
			continue
		}
		// Columns of op(A) are contiguous (rs == 1): each k step is MR consecutive values.
		for p := 0; p < kc; p++ {
			base := s.off + (i0+ir)*s.rs + (p0+p)*s.cs
			dp := d[p*gemmMR : (p+1)*gemmMR]
			if s.f32 != nil {
				copy(dp[:rows], s.f32[base:base+rows])
			} else {
				s.hf.Decode(dp[:rows], s.f16[base:base+rows])
			}
			clear(dp[rows:])
		}
	}
}

// packB packs op(B)[p0:p0+kc, j0:j0+nc] into NR-column panels: panel q holds columns q·NR.. as
// dst[q·NR·kc + p·NR + j], columns past nc zero.
func packB(dst []float32, s gemmSrc, p0, kc, j0, nc int) {
	for jr := 0; jr < nc; jr += gemmNR {
		cols := min(gemmNR, nc-jr)
		d := dst[jr*kc : jr*kc+gemmNR*kc]
		if s.cs == 1 {
			// Rows of op(B) are contiguous: a copy per k step.
			if s.f32 != nil && cols == gemmNR {
				for p := 0; p < kc; p++ {
					base := s.off + (p0+p)*s.rs + j0 + jr
					*(*[gemmNR]float32)(d[p*gemmNR:]) = *(*[gemmNR]float32)(s.f32[base:])
				}
				continue
			}
			for p := 0; p < kc; p++ {
				base := s.off + (p0+p)*s.rs + j0 + jr
				dp := d[p*gemmNR : (p+1)*gemmNR]
				if s.f32 != nil {
					copy(dp[:cols], s.f32[base:base+cols])
				} else {
					s.hf.Decode(dp[:cols], s.f16[base:base+cols])
				}
				clear(dp[cols:])
			}
			continue
		}
		// Columns of op(B) are contiguous (B stored transposed): transpose 8 columns at a time.
		j := 0
		for ; j+8 <= cols; j += 8 {
			base := s.off + p0 + (j0+jr+j)*s.cs
			if s.f32 != nil {
				transpose8(d[j:], s.f32[base:], s.cs, gemmNR, kc)
			} else {
				packBT8h(d[j:], s.f16[base:], s.hf.Table(), s.cs, kc)
			}
		}
		for ; j < cols; j++ {
			base := s.off + p0 + (j0+jr+j)*s.cs
			if s.f32 != nil {
				src := s.f32[base : base+kc]
				for p, v := range src {
					d[p*gemmNR+j] = v
				}
			} else {
				src := s.f16[base : base+kc]
				t := s.hf.Table()
				for p, h := range src {
					d[p*gemmNR+j] = t[h]
				}
			}
		}
		if cols < gemmNR {
			for p := 0; p < kc; p++ {
				clear(d[p*gemmNR+cols : (p+1)*gemmNR])
			}
		}
	}
}

// transpose8 writes d[p·ldd + c] = s[c·cs + p] for c < 8, p < kc: eight contiguous source rows
// into eight columns of a packed panel. Assembly (8×8 transposes in registers) where available.
var transpose8 = transpose8Go

func transpose8Go(d, s []float32, cs, ldd, kc int) {
	if kc == 0 {
		return
	}
	s0 := s[0*cs : 0*cs+kc]
	s1 := s[1*cs : 1*cs+kc]
	s2 := s[2*cs : 2*cs+kc]
	s3 := s[3*cs : 3*cs+kc]
	s4 := s[4*cs : 4*cs+kc]
	s5 := s[5*cs : 5*cs+kc]
	s6 := s[6*cs : 6*cs+kc]
	s7 := s[7*cs : 7*cs+kc]
	for p := range s0 {
		dp := d[p*ldd : p*ldd+8]
		dp[0], dp[1], dp[2], dp[3] = s0[p], s1[p], s2[p], s3[p]
		dp[4], dp[5], dp[6], dp[7] = s4[p], s5[p], s6[p], s7[p]
	}
}

func packBT8h(d []float32, s []uint16, t *[1 << 16]float32, cs, kc int) {
	for c := 0; c < 8; c++ {
		src := s[c*cs : c*cs+kc]
		for p, h := range src {
			d[p*gemmNR+c] = t[h]
		}
	}
}

// gemmKernGo is the portable micro-kernel: the tile in 4×4 blocks of scalar accumulators, which
// the compiler keeps in registers.
func gemmKernGo(k int, a, b, c *float32, ldc int, alpha, beta float32) {
	as := unsafe.Slice(a, k*gemmMR)
	bs := unsafe.Slice(b, k*gemmNR)
	cs := unsafe.Slice(c, (gemmMR-1)*ldc+gemmNR)
	for i := 0; i < gemmMR; i += 4 {
		for j := 0; j < gemmNR; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			var c20, c21, c22, c23, c30, c31, c32, c33 float32
			for p := 0; p < k; p++ {
				ap := (*[4]float32)(as[p*gemmMR+i:])
				bp := (*[4]float32)(bs[p*gemmNR+j:])
				a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
				b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
				c00 += a0 * b0
				c01 += a0 * b1
				c02 += a0 * b2
				c03 += a0 * b3
				c10 += a1 * b0
				c11 += a1 * b1
				c12 += a1 * b2
				c13 += a1 * b3
				c20 += a2 * b0
				c21 += a2 * b1
				c22 += a2 * b2
				c23 += a2 * b3
				c30 += a3 * b0
				c31 += a3 * b1
				c32 += a3 * b2
				c33 += a3 * b3
			}
			acc := [4][4]float32{{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}, {c30, c31, c32, c33}}
			for r := range 4 {
				row := (*[4]float32)(cs[(i+r)*ldc+j:])
				if beta == 0 {
					for q := range 4 {
						row[q] = alpha * acc[r][q]
					}
				} else {
					for q := range 4 {
						row[q] = alpha*acc[r][q] + beta*row[q]
					}
				}
			}
		}
	}
}

// gemm computes C (m×n, row stride n) = alpha·op(A)·op(B) + beta·C across the device's threads.
func (c *Device) gemm(m, n, k int, A, B gemmSrc, C []float32, alpha, beta float32) {
	if m == 0 || n == 0 {
		return
	}
	threads := c.threads
	if m*n*k < 1<<17 {
		threads = 1
	}
	if n >= m && threads > 1 && k > 0 && (m+gemmMR)*k <= gemmSharedMax {
		c.gemmSharedA(m, n, k, A, B, C, alpha, beta, threads)
		return
	}
	// Split the longer side of C: each thread packs all of the other operand, so the redundant
	// packing is of the smaller one.
	splitN := n >= m
	unit := gemmMR
	span := m
	if splitN {
		unit, span = gemmNR, n
	}
	units := (span + unit - 1) / unit
	parts := max(1, min(threads, units))
	if parts == 1 {
		w := gemmPool.Get().(*gemmWS)
		w.gemm(0, m, 0, n, k, A, B, C, n, alpha, beta)
		gemmPool.Put(w)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo := min(span, units*p/parts*unit)
		hi := min(span, units*(p+1)/parts*unit)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := gemmPool.Get().(*gemmWS)
			if splitN {
				w.gemm(0, m, lo, hi, k, A, B, C, n, alpha, beta)
			} else {
				w.gemm(lo, hi, 0, n, k, A, B, C, n, alpha, beta)
			}
			gemmPool.Put(w)
		}()
	}
	wg.Wait()
}

// gemmOut returns the f32 slice a product writes C through and the function that finishes C:
// C's own memory when f32; for f16 or bf16 a pooled f32 scratch (holding C's values when keep),
// rounded into C by done. No allocation per call either way.
func gemmOut(C *tensor.Tensor, keep bool) (out []float32, done func()) {
	if !isHalf(C.DType()) {
		return outBuf(C, keep), func() {}
	}
	p, _ := gemmScratch.Get().(*[]float32)
	if p == nil {
		p = new([]float32)
	}
	*p = grow(*p, C.Len())
	out = *p
	f := formatOf(C.DType())
	if keep {
		f.Decode(out, h16s(C))
	}
	return out, func() {
		f.Encode(h16s(C), out)
		gemmScratch.Put(p)
	}
}

var gemmScratch sync.Pool

// gemmSharedMax bounds the packed copy of all of op(A) that gemmSharedA makes (floats).
const gemmSharedMax = 1 << 22

// gemmSharedA is the threaded product for C at least as wide as tall (the MLP's 128×1024 outputs):
// all of op(A) is packed once, by all threads, into one shared buffer; then the threads take
// chunks of C's columns from a counter, each packing its chunk of op(B) and running the kernel
// over all rows. Taking chunks as they go (instead of halves) keeps both cores busy when one is
// slowed by something else on the machine. Every element of C still sums over K in the same
// order, so results do not depend on the schedule.
func (c *Device) gemmSharedA(m, n, k int, A, B gemmSrc, C []float32, alpha, beta float32, threads int) {
	mp := (m + gemmMR - 1) / gemmMR * gemmMR
	kb := (k + gemmKC - 1) / gemmKC
	ap, _ := gemmScratch.Get().(*[]float32)
	if ap == nil {
		ap = new([]float32)
	}
	*ap = grow(*ap, kb*gemmKC*mp)
	abuf := *ap
	// Pack op(A): block q (depth rows q·KC..) at q·KC·mp, MR-row panels inside as packA lays out.
	panels := mp / gemmMR
	c.parallel(panels*kb, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			q, p := t/panels, t%panels
			pc := q * gemmKC
			kc := min(gemmKC, k-pc)
			i0 := p * gemmMR
			packA(abuf[q*gemmKC*mp+i0*kc:], A, i0, min(gemmMR, m-i0), pc, kc)
		}
	})
	units := (n + gemmNR - 1) / gemmNR
	per := max(1, units/(threads*4)) // about four chunks per thread
	chunks := (units + per - 1) / per
	var next atomic.Int64
	work := func() {
		w := gemmPool.Get().(*gemmWS)
		kern := gemmKern
		for {
			ch := int(next.Add(1) - 1)
			if ch >= chunks {
				break
			}
			j0 := ch * per * gemmNR
			nc := min(per*gemmNR, n-j0)
			for q := 0; q < kb; q++ {
				pc := q * gemmKC
				kc := min(gemmKC, k-pc)
				w.b = grow(w.b, kc*per*gemmNR)
				packB(w.b, B, pc, kc, j0, nc)
				bet := beta
				if q > 0 {
					bet = 1
				}
				ab := abuf[q*gemmKC*mp:]
				for ic := 0; ic < m; ic += gemmMC {
					mc := min(gemmMC, m-ic)
					w.macro(kern, kc, ab[ic*kc:], mc, w.b, nc, C, ic*n+j0, n, alpha, bet)
				}
			}
		}
		gemmPool.Put(w)
	}
	var wg sync.WaitGroup
	for t := 1; t < min(threads, chunks); t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	gemmScratch.Put(ap)
}

type namedKernel struct {
	name string
	fn   gemmKernel
}
