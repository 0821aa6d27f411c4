package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/goddp/goddp/model/tensor"
)

// The CPU's tensor.ConvDevice: convolution as im2col + the packed SGEMM of gemm.go, batch
// normalisation, max and global average pooling, all on NCHW tensors.
//
// Convolution, for a chunk of g images at a time (g = convImages: enough images that the GEMM
// has ≥ convMinCols columns, so the small late-stage planes, 7×7 or 4×4, still make wide GEMMs):
//
//	col  (K, g·P)  = im2col(x[n0:n0+g])          K = C·KH·KW, P = OH·OW
//	ycm  (OC, g·P) = w (OC,K) · col               one single-threaded GEMM per chunk
//	y[n] (OC, P)   = ycm[:, (n−n0)·P : …] + b     scattered back to NCHW
//
// and backward, per chunk, with dycm (OC, g·P) gathered from dy:
//
//	dw (OC,K) += dycm · colᵀ      (col recomputed from x: nothing is saved by the forward)
//	dcol (K, g·P) = wᵀ · dycm,  dx = col2im(dcol)
//
// Chunks are spread over the threads, each with its own col buffer (≈ K·g·P floats, a few
// hundred KiB: it stays in L2) and, in backward, its own dw partial; the partials are summed in
// part order, so results do not depend on timing. docs/perf-cpu.md has the measurements.

var _ tensor.ConvDevice = (*Device)(nil)

const convMinCols = 512

// convWS is one thread's scratch for a convolution chunk.
type convWS struct {
	col, cm, dcol []float32
	dw, db        []float32
}

var convPool = sync.Pool{New: func() any { return new(convWS) }}

// convShape checks y = conv(x, w) shapes and returns them.
func convShape(op string, y, x, w *tensor.Tensor, g tensor.ConvGeom) (N, C, H, W, OC, OH, OW int) {
	if err := g.Valid(); err != nil {
		panic("cpu: " + op + ": " + err.Error())
	}
	xs, ws, ys := x.Shape(), w.Shape(), y.Shape()
	if len(xs) != 4 || len(ws) != 4 || len(ys) != 4 {
		panic(fmt.Sprintf("cpu: %s wants 4-D x, w, y: x %s, w %s, y %s", op, x, w, y))
	}
	N, C, H, W = xs[0], xs[1], xs[2], xs[3]
	OC = ws[0]
	OH, OW = g.OutHW(H, W)
	if ws[1] != C || ws[2] != g.KH || ws[3] != g.KW || ys[0] != N || ys[1] != OC || ys[2] != OH || ys[3] != OW || OH < 1 || OW < 1 {
		panic(fmt.Sprintf("cpu: %s shapes: y %s = x %s ⋆ w %s with %+v (want y %d×%d×%d×%d)", op, y, x, w, g, N, OC, OH, OW))
	}
	return
}

// convImages is how many images one GEMM takes: ≥ convMinCols columns, but at least one chunk
// per thread when the batch allows.
func (c *Device) convImages(N, P int) int {
	g := max(1, (convMinCols+P-1)/P)
	return max(1, min(g, (N+c.threads-1)/c.threads))
}

// im2col writes image x (C,H,W) into col rows r = (ci·KH+kh)·KW+kw, columns c0..c0+OH·OW of a
// row stride ld: col[r][c0 + oh·OW + ow] = x[ci][oh·s−pad+kh][ow·s−pad+kw] (0 outside).
func im2col(col []float32, ld, c0 int, x []float32, C, H, W int, g tensor.ConvGeom, OH, OW int) {
	s, pad := g.Stride, g.Pad
	same := s == 1 && OH == H && OW == W // "same" padding: each row is the plane shifted
	for ci := 0; ci < C; ci++ {
		plane := x[ci*H*W : (ci+1)*H*W]
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				r := (ci*g.KH+kh)*g.KW + kw
				dst := col[r*ld+c0 : r*ld+c0+OH*OW]
				lo, hi := convSpan(OW, W, s, pad, kw)
				if hi < lo {
					hi = lo
				}
				if same {
					// dst[p] = plane[p + delta] where that is in the plane, then the columns
					// that wrapped around a row edge zeroed
					P := H * W
					delta := (kh-pad)*W + (kw - pad)
					a, b := min(P, max(0, -delta)), min(P, P-delta)
					clear(dst[:a])
					if b > a {
						copy(dst[a:b], plane[a+delta:b+delta])
					} else {
						b = a
					}
					clear(dst[b:])
					if lo > 0 || hi < OW {
						for oh := 0; oh < OH; oh++ {
							row := dst[oh*OW : (oh+1)*OW]
							clear(row[:lo])
							clear(row[hi:])
						}
					}
					continue
				}
				for oh := 0; oh < OH; oh++ {
					ih := oh*s - pad + kh
					row := dst[oh*OW : (oh+1)*OW]
					if ih < 0 || ih >= H {
						clear(row)
						continue
					}
					src := plane[ih*W : (ih+1)*W]
					clear(row[:lo])
					clear(row[hi:])
					if s == 1 {
						copy(row[lo:hi], src[lo-pad+kw:hi-pad+kw])
					} else {
						for ow := lo; ow < hi; ow++ {
							row[ow] = src[ow*s-pad+kw]
						}
					}
				}
			}
		}
	}
}

// convSpan is the range [lo, hi) of output columns ow whose input column ow·s − pad + kw lies
// in [0, W) (hi < lo when none does).
func convSpan(OW, W, s, pad, kw int) (lo, hi int) {
	lo = max(0, (pad-kw+s-1)/s)
	if W-1+pad-kw < 0 {
		return lo, 0
	}
	return lo, min(OW, (W-1+pad-kw)/s+1)
}

// col2im is im2col's adjoint: dx (C,H,W) += the columns c0.. of dcol folded back. With "same"
// padding it zeroes dcol's wrapped-around columns (scratch) and adds each row in one pass.
func col2im(dx []float32, dcol []float32, ld, c0 int, C, H, W int, g tensor.ConvGeom, OH, OW int) {
	s, pad := g.Stride, g.Pad
	same := s == 1 && OH == H && OW == W
	for ci := 0; ci < C; ci++ {
		plane := dx[ci*H*W : (ci+1)*H*W]
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				r := (ci*g.KH+kh)*g.KW + kw
				src := dcol[r*ld+c0 : r*ld+c0+OH*OW]
				lo, hi := convSpan(OW, W, s, pad, kw)
				if hi <= lo {
					continue
				}
				if same {
					if lo > 0 || hi < OW {
						for oh := 0; oh < OH; oh++ {
							row := src[oh*OW : (oh+1)*OW]
							clear(row[:lo])
							clear(row[hi:])
						}
					}
					P := H * W
					delta := (kh-pad)*W + (kw - pad)
					a, b := min(P, max(0, -delta)), min(P, P-delta)
					if b > a {
						d := plane[a+delta : b+delta]
						sr := src[a:b]
						sr = sr[:len(d)]
						for i, v := range sr {
							d[i] += v
						}
					}
					continue
				}
				for oh := 0; oh < OH; oh++ {
					ih := oh*s - pad + kh
					if ih < 0 || ih >= H {
						continue
					}
					dst := plane[ih*W : (ih+1)*W]
					row := src[oh*OW : (oh+1)*OW]
					if s == 1 {
						d := dst[lo-pad+kw : hi-pad+kw]
						r := row[lo:hi]
						r = r[:len(d)]
						for i, v := range r {
							d[i] += v
						}
					} else {
						for ow := lo; ow < hi; ow++ {
							dst[ow*s-pad+kw] += row[ow]
						}
					}
				}
			}
		}
	}
}

func (c *Device) nchwConv2d(y, x, w, b *tensor.Tensor, g tensor.ConvGeom) {
	N, C, H, W, OC, OH, OW := convShape("Conv2d", y, x, w, g)
	if b != nil && b.Len() != OC {
		panic(fmt.Sprintf("cpu: Conv2d: bias %s for %d output channels", b, OC))
	}
	xs, wsl := read(x), read(w)
	var bs []float32
	if b != nil {
		bs = read(b)
	}
	ys := outBuf(y, false)
	c.conv2d(ys, xs, wsl, bs, N, C, H, W, OC, OH, OW, g)
	commit(y, ys)
}

// conv2d is Conv2d on slices: ys (N,OC,OH,OW) = xs (N,C,H,W) ⋆ wsl (OC,C,KH,KW) + bs (or nil).
func (c *Device) conv2d(ys, xs, wsl, bs []float32, N, C, H, W, OC, OH, OW int, g tensor.ConvGeom) {
	K, P := C*g.KH*g.KW, OH*OW
	gi := c.convImages(N, P)
	chunks := (N + gi - 1) / gi
	c.parallel(chunks, 1, func(lo, hi int) {
		ws := convPool.Get().(*convWS)
		gw := gemmPool.Get().(*gemmWS)
		for ch := lo; ch < hi; ch++ {
			n0, n1 := ch*gi, min(N, (ch+1)*gi)
			cols := (n1 - n0) * P
			ws.col = grow(ws.col, K*cols)
			for n := n0; n < n1; n++ {
				im2col(ws.col, cols, (n-n0)*P, xs[n*C*H*W:(n+1)*C*H*W], C, H, W, g, OH, OW)
			}
			direct := n1-n0 == 1 // one image: the GEMM writes y[n] itself
			var out []float32
			if direct {
				out = ys[n0*OC*P : (n0+1)*OC*P]
			} else {
				ws.cm = grow(ws.cm, OC*cols)
				out = ws.cm
			}
			gw.gemm(0, OC, 0, cols, K, gemmSrc{f32: wsl, rs: K, cs: 1}, gemmSrc{f32: ws.col, rs: cols, cs: 1}, out, cols, 1, 0)
			for n := n0; n < n1; n++ {
				for oc := 0; oc < OC; oc++ {
					dst := ys[(n*OC+oc)*P : (n*OC+oc+1)*P]
					if !direct {
						copy(dst, out[oc*cols+(n-n0)*P:oc*cols+(n-n0+1)*P])
					}
					if bs != nil {
						bv := bs[oc]
						for i := range dst {
							dst[i] += bv
						}
					}
				}
			}
		}
		gemmPool.Put(gw)
		convPool.Put(ws)
	})
}

// transposedSame reports whether a convolution's input gradient is itself a convolution of the
// same kind: stride 1 and "same" padding (2·pad = K−1 both ways), where dx = dy ⋆ w', w' the
// kernel flipped with in and out channels swapped. That runs through im2col (copies) and the
// GEMM instead of col2im's scattered adds.
func transposedSame(g tensor.ConvGeom, H, W, OH, OW int) bool {
	return g.Stride == 1 && g.KH == g.KW && 2*g.Pad == g.KH-1 && OH == H && OW == W
}

// flipKernel is w' (C,OC,KH,KW) of w (OC,C,KH,KW): w'[c][oc][kh][kw] = w[oc][c][KH−1−kh][KW−1−kw].
func flipKernel(w []float32, OC, C, KH, KW int) []float32 {
	f := make([]float32, len(w))
	for oc := 0; oc < OC; oc++ {
		for ci := 0; ci < C; ci++ {
			for kh := 0; kh < KH; kh++ {
				for kw := 0; kw < KW; kw++ {
					f[((ci*OC+oc)*KH+kh)*KW+kw] = w[((oc*C+ci)*KH+KH-1-kh)*KW+KW-1-kw]
				}
			}
		}
	}
	return f
}

func (c *Device) nchwConv2dBackward(dx, dw, db, dy, x, w *tensor.Tensor, g tensor.ConvGeom) {
	N, C, H, W, OC, OH, OW := convShape("Conv2dBackward", dy, x, w, g)
	K, P := C*g.KH*g.KW, OH*OW
	if dx != nil && !tensor.SameShape(dx, x) {
		panic(fmt.Sprintf("cpu: Conv2dBackward: dx %s for x %s", dx, x))
	}
	if dw.Len() != OC*K || (db != nil && db.Len() != OC) {
		panic(fmt.Sprintf("cpu: Conv2dBackward: dw %s, db %v for w %s", dw, db, w))
	}
	xs, wsl, dys := read(x), read(w), read(dy)
	var dxs []float32
	if dx != nil {
		dxs = outBuf(dx, false)
	}
	viaConv := dxs != nil && transposedSame(g, H, W, OH, OW)
	if viaConv {
		c.conv2d(dxs, dys, flipKernel(wsl, OC, C, g.KH, g.KW), nil, N, OC, OH, OW, C, H, W, g)
	}
	gi := c.convImages(N, P)
	chunks := (N + gi - 1) / gi
	parts := c.partsFor(chunks, 1)
	wss := make([]*convWS, parts)
	c.parallelParts(chunks, 1, func(part, lo, hi int) {
		ws := convPool.Get().(*convWS)
		wss[part] = ws
		gw := gemmPool.Get().(*gemmWS)
		ws.dw = grow(ws.dw, OC*K)
		clear(ws.dw)
		ws.db = grow(ws.db, OC)
		clear(ws.db)
		for ch := lo; ch < hi; ch++ {
			n0, n1 := ch*gi, min(N, (ch+1)*gi)
			cols := (n1 - n0) * P
			// dycm (OC, cols): the chunk's output gradient, channel-major
			var dycm []float32
			if n1-n0 == 1 {
				dycm = dys[n0*OC*P : (n0+1)*OC*P]
			} else {
				ws.cm = grow(ws.cm, OC*cols)
				dycm = ws.cm
				for n := n0; n < n1; n++ {
					for oc := 0; oc < OC; oc++ {
						copy(dycm[oc*cols+(n-n0)*P:oc*cols+(n-n0+1)*P], dys[(n*OC+oc)*P:(n*OC+oc+1)*P])
					}
				}
			}
			if db != nil {
				for oc := 0; oc < OC; oc++ {
					var s float32
					for _, v := range dycm[oc*cols : (oc+1)*cols] {
						s += v
					}
					ws.db[oc] += s
				}
			}
			ws.col = grow(ws.col, K*cols)
			for n := n0; n < n1; n++ {
				im2col(ws.col, cols, (n-n0)*P, xs[n*C*H*W:(n+1)*C*H*W], C, H, W, g, OH, OW)
			}
			// dw (OC,K) += dycm (OC,cols) · colᵀ (cols,K)
			gw.gemm(0, OC, 0, K, cols, gemmSrc{f32: dycm, rs: cols, cs: 1}, gemmSrc{f32: ws.col, rs: 1, cs: cols}, ws.dw, K, 1, 1)
			if dxs != nil && !viaConv {
				// dcol (K,cols) = wᵀ (K,OC) · dycm (OC,cols)
				ws.dcol = grow(ws.dcol, K*cols)
				gw.gemm(0, K, 0, cols, OC, gemmSrc{f32: wsl, rs: 1, cs: K}, gemmSrc{f32: dycm, rs: cols, cs: 1}, ws.dcol, cols, 1, 0)
				for n := n0; n < n1; n++ {
					img := dxs[n*C*H*W : (n+1)*C*H*W]
					clear(img)
					col2im(img, ws.dcol, cols, (n-n0)*P, C, H, W, g, OH, OW)
				}
			}
		}
		gemmPool.Put(gw)
	})
	dws := outBuf(dw, true)
	var dbs []float32
	if db != nil {
		dbs = outBuf(db, true)
	}
	for _, ws := range wss {
		if ws == nil {
			continue
		}
		for i, v := range ws.dw[:OC*K] {
			dws[i] += v
		}
		for i := range dbs {
			dbs[i] += ws.db[i]
		}
		convPool.Put(ws)
	}
	commit(dw, dws)
	if db != nil {
		commit(db, dbs)
	}
	if dx != nil {
		commit(dx, dxs)
	}
}

// ---- batch normalisation: x (N,C,P) per channel over N·P ----

func bnShape(op string, x *tensor.Tensor, stats ...*tensor.Tensor) (N, C, P int) {
	s := x.Shape()
	if len(s) < 2 {
		panic(fmt.Sprintf("cpu: %s wants x (N,C,…), got %s", op, x))
	}
	N, C = s[0], s[1]
	P = x.Len() / max(1, N*C)
	for _, t := range stats {
		if t != nil && t.Len() != C {
			panic(fmt.Sprintf("cpu: %s: %s for %d channels of %s", op, t, C, x))
		}
	}
	return
}

func (c *Device) nchwBatchNorm(y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32) {
	N, C, P := bnShape("BatchNorm", x, mean, rstd, runMean, runVar, w, b)
	tensor.CheckLen("BatchNorm", y, x)
	xs, ws, bs := read(x), read(w), read(b)
	ys := outBuf(y, false)
	ms, rs := f32s(mean), f32s(rstd)
	var rm, rv []float32
	if runMean != nil {
		rm, rv = f32s(runMean), f32s(runVar)
	}
	M := float64(N * P)
	c.parallel(C, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, ss := channelMoments(xs, N, C, P, ch)
			vr := ss / M
			r := 1 / math.Sqrt(vr+float64(eps))
			ms[ch], rs[ch] = float32(mu), float32(r)
			if rm != nil {
				unb := vr
				if M > 1 {
					unb = ss / (M - 1)
				}
				rm[ch] = (1-momentum)*rm[ch] + momentum*float32(mu)
				rv[ch] = (1-momentum)*rv[ch] + momentum*float32(unb)
			}
			sc := float32(r) * ws[ch]
			sh := bs[ch] - float32(mu)*sc
			for n := 0; n < N; n++ {
				src := xs[(n*C+ch)*P : (n*C+ch+1)*P]
				dst := ys[(n*C+ch)*P : (n*C+ch+1)*P]
				dst = dst[:len(src)]
				for i, v := range src {
					dst[i] = v*sc + sh
				}
			}
		}
	})
	commit(y, ys)
}

func (c *Device) nchwBatchNormInference(y, x, w, b, runMean, runVar *tensor.Tensor, eps float32) {
	N, C, P := bnShape("BatchNormInference", x, w, b, runMean, runVar)
	tensor.CheckLen("BatchNormInference", y, x)
	xs, ws, bs, rm, rv := read(x), read(w), read(b), read(runMean), read(runVar)
	ys := outBuf(y, false)
	c.parallel(N*C, max(1, 4096/max(P, 1)), func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			ch := nc % C
			sc := float32(1/math.Sqrt(float64(rv[ch])+float64(eps))) * ws[ch]
			sh := bs[ch] - rm[ch]*sc
			src, dst := xs[nc*P:(nc+1)*P], ys[nc*P:(nc+1)*P]
			for i, v := range src {
				dst[i] = v*sc + sh
			}
		}
	})
	commit(y, ys)
}

func (c *Device) nchwBatchNormBackward(dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	N, C, P := bnShape("BatchNormBackward", x, dw, db, w, mean, rstd)
	tensor.CheckLen("BatchNormBackward", dx, dy, x)
	xs, dys, ws := read(x), read(dy), read(w)
	ms, rs := f32s(mean), f32s(rstd)
	dxs := outBuf(dx, false)
	dws, dbs := f32s(dw), f32s(db)
	M := float64(N * P)
	c.parallel(C, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, r := float64(ms[ch]), float64(rs[ch])
			var sdy, sdyx float64 // Σ dy, Σ dy·x̂
			for n := 0; n < N; n++ {
				xr := xs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr := dys[(n*C+ch)*P : (n*C+ch+1)*P]
				dr = dr[:len(xr)]
				for i, v := range xr {
					g := float64(dr[i])
					sdy += g
					sdyx += g * (float64(v) - mu) * r
				}
			}
			dws[ch] += float32(sdyx)
			dbs[ch] += float32(sdy)
			// dx = w·rstd·(dy − Σdy/M − x̂·Σ(dy·x̂)/M)
			k := float64(ws[ch]) * r
			a, bb := sdy/M, sdyx/M
			for n := 0; n < N; n++ {
				xr := xs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr := dys[(n*C+ch)*P : (n*C+ch+1)*P]
				out := dxs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr, out = dr[:len(xr)], out[:len(xr)]
				for i, v := range xr {
					xh := (float64(v) - mu) * r
					out[i] = float32(k * (float64(dr[i]) - a - xh*bb))
				}
			}
		}
	})
	commit(dx, dxs)
}

// channelMoments is channel ch's mean over x (N,C,P) and its sum of squared deviations from it,
// in float64, two passes: training BatchNorm's statistics and SyncBatchNorm's per-rank part.
func channelMoments(xs []float32, N, C, P, ch int) (mu, ss float64) {
	var s float64
	for n := 0; n < N; n++ {
		for _, v := range xs[(n*C+ch)*P : (n*C+ch+1)*P] {
			s += float64(v)
		}
	}
	mu = s / float64(N*P)
	for n := 0; n < N; n++ {
		for _, v := range xs[(n*C+ch)*P : (n*C+ch+1)*P] {
			d := float64(v) - mu
			ss += d * d
		}
	}
	return mu, ss
}

// ---- SyncBatchNorm's parts (tensor.SyncBatchNormDevice) ----

var _ tensor.SyncBatchNormDevice = (*Device)(nil)

func (c *Device) nchwBatchNormStats(mean, variance, x *tensor.Tensor) {
	N, C, P := bnShape("BatchNormStats", x, mean, variance)
	xs := read(x)
	ms, vs := f32s(mean), f32s(variance)
	M := float64(N * P)
	c.parallel(C, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, ss := channelMoments(xs, N, C, P, ch)
			ms[ch], vs[ch] = float32(mu), float32(ss/M)
		}
	})
}

func (c *Device) nchwBatchNormBackwardReduce(sdy, sdyx, dw, db, dy, x, mean, rstd *tensor.Tensor) {
	N, C, P := bnShape("BatchNormBackwardReduce", x, sdy, sdyx, dw, db, mean, rstd)
	tensor.CheckLen("BatchNormBackwardReduce", dy, x)
	xs, dys := read(x), read(dy)
	ms, rs := f32s(mean), f32s(rstd)
	s1, s2 := f32s(sdy), f32s(sdyx)
	var dws, dbs []float32
	if dw != nil {
		dws = f32s(dw)
	}
	if db != nil {
		dbs = f32s(db)
	}
	c.parallel(C, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, r := float64(ms[ch]), float64(rs[ch])
			var a, b float64
			for n := 0; n < N; n++ {
				xr := xs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr := dys[(n*C+ch)*P : (n*C+ch+1)*P]
				dr = dr[:len(xr)]
				for i, v := range xr {
					g := float64(dr[i])
					a += g
					b += g * (float64(v) - mu) * r
				}
			}
			s1[ch], s2[ch] = float32(a), float32(b)
			if dws != nil {
				dws[ch] += float32(b)
			}
			if dbs != nil {
				dbs[ch] += float32(a)
			}
		}
	})
}

func (c *Device) nchwBatchNormBackwardElemt(dx, dy, x, w, mean, rstd, sdy, sdyx *tensor.Tensor, count int) {
	N, C, P := bnShape("BatchNormBackwardElemt", x, w, mean, rstd, sdy, sdyx)
	tensor.CheckLen("BatchNormBackwardElemt", dx, dy, x)
	xs, dys, ws := read(x), read(dy), read(w)
	ms, rs, s1, s2 := f32s(mean), f32s(rstd), f32s(sdy), f32s(sdyx)
	dxs := outBuf(dx, false)
	M := float64(max(count, 1))
	c.parallel(C, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, r := float64(ms[ch]), float64(rs[ch])
			k := float64(ws[ch]) * r
			a, bb := float64(s1[ch])/M, float64(s2[ch])/M
			for n := 0; n < N; n++ {
				xr := xs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr := dys[(n*C+ch)*P : (n*C+ch+1)*P]
				out := dxs[(n*C+ch)*P : (n*C+ch+1)*P]
				dr, out = dr[:len(xr)], out[:len(xr)]
				for i, v := range xr {
					xh := (float64(v) - mu) * r
					out[i] = float32(k * (float64(dr[i]) - a - xh*bb))
				}
			}
		}
	})
	commit(dx, dxs)
}

// ---- pooling ----

func (c *Device) nchwMaxPool2d(y, arg, x *tensor.Tensor, g tensor.ConvGeom) {
	if err := g.Valid(); err != nil {
		panic("cpu: MaxPool2d: " + err.Error())
	}
	xsh := x.Shape()
	N, C, H, W := xsh[0], xsh[1], xsh[2], xsh[3]
	OH, OW := g.OutHW(H, W)
	if ys := y.Shape(); len(ys) != 4 || ys[0] != N || ys[1] != C || ys[2] != OH || ys[3] != OW {
		panic(fmt.Sprintf("cpu: MaxPool2d: y %s for x %s with %+v", y, x, g))
	}
	tensor.CheckLen("MaxPool2d", y, arg)
	xs := read(x)
	ys := outBuf(y, false)
	as := i32s(arg)
	c.parallel(N*C, 1, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			plane := xs[nc*H*W : (nc+1)*H*W]
			for oh := 0; oh < OH; oh++ {
				for ow := 0; ow < OW; ow++ {
					best, at := float32(math.Inf(-1)), -1
					for kh := 0; kh < g.KH; kh++ {
						ih := oh*g.Stride - g.Pad + kh
						if ih < 0 || ih >= H {
							continue
						}
						for kw := 0; kw < g.KW; kw++ {
							iw := ow*g.Stride - g.Pad + kw
							if iw < 0 || iw >= W {
								continue
							}
							if v := plane[ih*W+iw]; v > best || at < 0 {
								best, at = v, ih*W+iw
							}
						}
					}
					o := (nc*OH+oh)*OW + ow
					ys[o], as[o] = best, int32(at)
				}
			}
		}
	})
	commit(y, ys)
}

func (c *Device) nchwMaxPool2dBackward(dx, dy, arg *tensor.Tensor) {
	tensor.CheckLen("MaxPool2dBackward", dy, arg)
	s := dx.Shape()
	N, C := s[0], s[1]
	HW := dx.Len() / (N * C)
	OP := dy.Len() / (N * C)
	dys := read(dy)
	as := i32s(arg)
	dxs := outBuf(dx, false)
	c.parallel(N*C, 1, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			plane := dxs[nc*HW : (nc+1)*HW]
			clear(plane)
			for o := nc * OP; o < (nc+1)*OP; o++ {
				plane[as[o]] += dys[o]
			}
		}
	})
	commit(dx, dxs)
}

func (c *Device) nchwGlobalAvgPool(y, x *tensor.Tensor) {
	s := x.Shape()
	N, C := s[0], s[1]
	if y.Len() != N*C {
		panic(fmt.Sprintf("cpu: GlobalAvgPool: y %s for x %s", y, x))
	}
	P := x.Len() / (N * C)
	xs := read(x)
	ys := outBuf(y, false)
	c.parallel(N*C, max(1, 4096/max(P, 1)), func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			var a float64
			for _, v := range xs[nc*P : (nc+1)*P] {
				a += float64(v)
			}
			ys[nc] = float32(a / float64(P))
		}
	})
	commit(y, ys)
}

func (c *Device) nchwGlobalAvgPoolBackward(dx, dy *tensor.Tensor) {
	s := dx.Shape()
	N, C := s[0], s[1]
	if dy.Len() != N*C {
		panic(fmt.Sprintf("cpu: GlobalAvgPoolBackward: dy %s for dx %s", dy, dx))
	}
	P := dx.Len() / (N * C)
	dys := read(dy)
	dxs := outBuf(dx, false)
	inv := 1 / float32(P)
	c.parallel(N*C, max(1, 4096/max(P, 1)), func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			v := dys[nc] * inv
			row := dxs[nc*P : (nc+1)*P]
			for i := range row {
				row[i] = v
			}
		}
	})
	commit(dx, dxs)
}
