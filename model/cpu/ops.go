package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// The CPU device's non-matmul operations, in the order of tensor.Device (model/tensor/device.go).

// ---- activations ----

func (c *Device) ReLU(y, x *tensor.Tensor) {
	tensor.CheckLen("ReLU", y, x)
	xs := read(x)
	ys := outBuf(y, false)
	c.parallel(len(ys), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ys[i] = max(xs[i], 0)
		}
	})
	commit(y, ys)
}

func (c *Device) ReLUBackward(dx, dy, y *tensor.Tensor) {
	tensor.CheckLen("ReLUBackward", dx, dy, y)
	ds, ys := read(dy), read(y)
	out := outBuf(dx, false)
	c.parallel(len(out), 1<<14, func(lo, hi int) {
		ds, ys, out := ds[lo:hi], ys[lo:hi], out[lo:hi]
		out = out[:len(ys)]
		ds = ds[:len(ys)]
		for i, y := range ys {
			// Select bits instead of branching: ReLU outputs are positive about half the time,
			// which a branch predicts badly (9x slower in docs/perf-cpu.md).
			b := math.Float32bits(ds[i])
			if !(y > 0) {
				b = 0
			}
			out[i] = math.Float32frombits(b)
		}
	})
	commit(dx, out)
}

const geluK = 0.7978845608028654 // √(2/π)

func (c *Device) GELU(y, x *tensor.Tensor) {
	tensor.CheckLen("GELU", y, x)
	xs := read(x)
	ys := outBuf(y, false)
	c.parallel(len(ys), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ys[i] = geluf(xs[i])
		}
	})
	commit(y, ys)
}

func (c *Device) GELUBackward(dx, dy, x *tensor.Tensor) {
	tensor.CheckLen("GELUBackward", dx, dy, x)
	xs, ds := read(x), read(dy)
	out := outBuf(dx, false)
	c.parallel(len(out), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = geluGradf(xs[i]) * ds[i]
		}
	})
	commit(dx, out)
}

func dropKeep(seed uint64, i int, p float32) bool { return tensor.Uniform01(seed, uint64(i)) >= p }

func (c *Device) Dropout(y, x *tensor.Tensor, p float32, seed uint64) {
	tensor.CheckLen("Dropout", y, x)
	xs := read(x)
	ys := outBuf(y, false)
	s := 1 / (1 - p)
	c.parallel(len(ys), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if dropKeep(seed, i, p) {
				ys[i] = xs[i] * s
			} else {
				ys[i] = 0
			}
		}
	})
	commit(y, ys)
}

func (c *Device) DropoutBackward(dx, dy *tensor.Tensor, p float32, seed uint64) {
	c.Dropout(dx, dy, p, seed)
}

// ---- layer norm ----

func (c *Device) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, eps float32) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("LayerNorm", y, x)
	if mean.Len() != r || rstd.Len() != r || w.Len() != cols || b.Len() != cols {
		panic(fmt.Sprintf("cpu: LayerNorm shapes: x %s, w %s, b %s, mean %s, rstd %s", x, w, b, mean, rstd))
	}
	xs, ws, bs := read(x), read(w), read(b)
	ys := outBuf(y, false)
	ms, rs := f32s(mean), f32s(rstd)
	c.parallel(r, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := xs[i*cols : (i+1)*cols]
			var s float64
			for _, v := range row {
				s += float64(v)
			}
			m := s / float64(cols)
			var q float64
			for _, v := range row {
				d := float64(v) - m
				q += d * d
			}
			rsd := 1 / math.Sqrt(q/float64(cols)+float64(eps))
			out := ys[i*cols : (i+1)*cols]
			mf, rf := float32(m), float32(rsd)
			for j, v := range row {
				out[j] = (v-mf)*rf*ws[j] + bs[j]
			}
			ms[i], rs[i] = mf, rf
		}
	})
	commit(y, ys)
}

func (c *Device) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("LayerNormBackward", dx, dy, x)
	xs, ds, ws := read(x), read(dy), read(w)
	ms, rs := f32s(mean), f32s(rstd)
	dxs := outBuf(dx, true)
	// Parameter gradients: per-thread partial sums, then one reduction.
	parts := make([][]float64, c.partsFor(r, 16))
	c.parallelParts(r, 16, func(part, lo, hi int) {
		acc := make([]float64, 2*cols) // dw then db
		for i := lo; i < hi; i++ {
			row := xs[i*cols : (i+1)*cols]
			drow := ds[i*cols : (i+1)*cols]
			m, rsd := ms[i], rs[i]
			var sumD, sumDX float64 // Σ dnorm, Σ dnorm·xhat
			for j, v := range row {
				xh := (v - m) * rsd
				dn := drow[j] * ws[j]
				sumD += float64(dn)
				sumDX += float64(dn * xh)
				acc[j] += float64(drow[j] * xh)
				acc[cols+j] += float64(drow[j])
			}
			meanD := float32(sumD / float64(cols))
			meanDX := float32(sumDX / float64(cols))
			out := dxs[i*cols : (i+1)*cols]
			for j, v := range row {
				xh := (v - m) * rsd
				dn := drow[j] * ws[j]
				out[j] += (dn - meanD - xh*meanDX) * rsd
			}
		}
		parts[part] = acc
	})
	commit(dx, dxs)
	dws, dbs := outBuf(dw, true), outBuf(db, true)
	for j := 0; j < cols; j++ {
		var sw, sb float64
		for _, p := range parts {
			if p != nil {
				sw += p[j]
				sb += p[cols+j]
			}
		}
		dws[j] += float32(sw)
		dbs[j] += float32(sb)
	}
	commit(dw, dws)
	commit(db, dbs)
}

// ---- embeddings ----

func (c *Device) Embedding(out, ids, wte, wpe *tensor.Tensor) {
	if len(ids.Shape()) != 2 || out.Len() != ids.Len()*wte.Cols() {
		panic(fmt.Sprintf("cpu: Embedding shapes: out %s, ids %s, wte %s", out, ids, wte))
	}
	bt, tt, cols := ids.Len(), ids.Shape()[1], wte.Cols()
	is := i32s(ids)
	es := read(wte)
	var ps []float32
	if wpe != nil {
		if wpe.Rows() < tt || wpe.Cols() != cols {
			panic(fmt.Sprintf("cpu: Embedding: wpe %s too small for T=%d", wpe, tt))
		}
		ps = read(wpe)
	}
	vocab := wte.Rows()
	os := outBuf(out, false)
	c.parallel(bt, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			id := int(is[r])
			if id < 0 || id >= vocab {
				panic(fmt.Sprintf("cpu: Embedding: token id %d at position %d outside the vocabulary of %d", id, r, vocab))
			}
			dst := os[r*cols : (r+1)*cols]
			copy(dst, es[id*cols:(id+1)*cols])
			if ps != nil {
				t := r % tt
				for j, v := range ps[t*cols : (t+1)*cols] {
					dst[j] += v
				}
			}
		}
	})
	commit(out, os)
}

func (c *Device) EmbeddingBackward(dwte, dwpe, dout, ids *tensor.Tensor) {
	bt, tt, cols := ids.Len(), ids.Shape()[1], dwte.Cols()
	is := i32s(ids)
	ds := read(dout)
	dw := outBuf(dwte, true)
	for r := 0; r < bt; r++ {
		id := int(is[r])
		dst := dw[id*cols : (id+1)*cols]
		for j, v := range ds[r*cols : (r+1)*cols] {
			dst[j] += v
		}
	}
	commit(dwte, dw)
	if dwpe != nil {
		dp := outBuf(dwpe, true)
		for r := 0; r < bt; r++ {
			t := r % tt
			dst := dp[t*cols : (t+1)*cols]
			for j, v := range ds[r*cols : (r+1)*cols] {
				dst[j] += v
			}
		}
		commit(dwpe, dp)
	}
}

// ---- softmax and attention layout ----

func (c *Device) Softmax(y, x *tensor.Tensor, scale float32, causal bool) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("Softmax", y, x)
	if causal && (len(x.Shape()) < 2 || x.Dim(-2) != cols) {
		panic(fmt.Sprintf("cpu: causal Softmax wants (…,T,T), got %s", x))
	}
	xs := read(x)
	ys := outBuf(y, false)
	c.parallel(r, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := xs[i*cols : (i+1)*cols]
			out := ys[i*cols : (i+1)*cols]
			n := cols
			if causal {
				n = i%cols + 1
			}
			mx := float32(math.Inf(-1))
			for _, v := range row[:n] {
				mx = max(mx, v*scale)
			}
			var s float32
			for j, v := range row[:n] {
				e := expf(v*scale - mx)
				out[j] = e
				s += e
			}
			inv := 1 / s
			for j := range out[:n] {
				out[j] *= inv
			}
			clear(out[n:])
		}
	})
	commit(y, ys)
}

func (c *Device) SoftmaxBackward(dx, dy, y *tensor.Tensor, scale float32) {
	r, cols := tensor.MatDims(y)
	tensor.CheckLen("SoftmaxBackward", dx, dy, y)
	ds, ys := read(dy), read(y)
	out := outBuf(dx, false)
	c.parallel(r, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			drow, yrow := ds[i*cols:(i+1)*cols], ys[i*cols:(i+1)*cols]
			var dot float32
			for j, v := range yrow {
				dot += v * drow[j]
			}
			orow := out[i*cols : (i+1)*cols]
			for j, v := range yrow {
				orow[j] = scale * v * (drow[j] - dot)
			}
		}
	})
	commit(dx, out)
}

func (c *Device) SplitQKV(q, k, v, qkv *tensor.Tensor) {
	b, h, t, hs := tensor.QKVDims("SplitQKV", q, k, v, qkv)
	src := read(qkv)
	outs := [3][]float32{outBuf(q, false), outBuf(k, false), outBuf(v, false)}
	C := h * hs
	c.parallel(b*t, 16, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			bi, ti := bt/t, bt%t
			row := src[bt*3*C : (bt+1)*3*C]
			for part := 0; part < 3; part++ {
				for hi := 0; hi < h; hi++ {
					dst := outs[part][((bi*h+hi)*t+ti)*hs:][:hs]
					copy(dst, row[part*C+hi*hs:][:hs])
				}
			}
		}
	})
	commit(q, outs[0])
	commit(k, outs[1])
	commit(v, outs[2])
}

func (c *Device) MergeQKV(dqkv, dq, dk, dv *tensor.Tensor) {
	b, h, t, hs := tensor.QKVDims("MergeQKV", dq, dk, dv, dqkv)
	ins := [3][]float32{read(dq), read(dk), read(dv)}
	dst := outBuf(dqkv, false)
	C := h * hs
	c.parallel(b*t, 16, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			bi, ti := bt/t, bt%t
			row := dst[bt*3*C : (bt+1)*3*C]
			for part := 0; part < 3; part++ {
				for hi := 0; hi < h; hi++ {
					copy(row[part*C+hi*hs:][:hs], ins[part][((bi*h+hi)*t+ti)*hs:][:hs])
				}
			}
		}
	})
	commit(dqkv, dst)
}

func (c *Device) Permute0213(dst, src *tensor.Tensor) {
	if len(src.Shape()) != 4 || len(dst.Shape()) != 4 {
		panic(fmt.Sprintf("cpu: Permute0213 wants 4-D tensors: dst %s, src %s", dst, src))
	}
	a, b, cc, d := src.Shape()[0], src.Shape()[1], src.Shape()[2], src.Shape()[3]
	if dst.Shape()[0] != a || dst.Shape()[1] != cc || dst.Shape()[2] != b || dst.Shape()[3] != d {
		panic(fmt.Sprintf("cpu: Permute0213: dst %s is not src %s with dims 1 and 2 swapped", dst, src))
	}
	s := read(src)
	o := outBuf(dst, false)
	c.parallel(a*b, 16, func(lo, hi int) {
		for ab := lo; ab < hi; ab++ {
			ai, bi := ab/b, ab%b
			for ci := 0; ci < cc; ci++ {
				copy(o[((ai*cc+ci)*b+bi)*d:][:d], s[((ai*b+bi)*cc+ci)*d:][:d])
			}
		}
	})
	commit(dst, o)
}

// ---- loss ----

func (c *Device) CrossEntropy(losses, logits, targets *tensor.Tensor) {
	r, v := tensor.MatDims(logits)
	if losses.Len() != r || targets.Len() != r || losses.DType() != tensor.F32 {
		panic(fmt.Sprintf("cpu: CrossEntropy shapes: losses %s, logits %s, targets %s", losses, logits, targets))
	}
	ls, ts, out := read(logits), i32s(targets), f32s(losses)
	c.parallel(r, 8, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := int(ts[i])
			if t < 0 {
				out[i] = 0
				continue
			}
			if t >= v {
				panic(fmt.Sprintf("cpu: CrossEntropy: target %d at row %d outside %d classes", t, i, v))
			}
			row := ls[i*v : (i+1)*v]
			mx := float32(math.Inf(-1))
			for _, x := range row {
				mx = max(mx, x)
			}
			var s float64
			for _, x := range row {
				s += float64(expf(x - mx))
			}
			out[i] = float32(math.Log(s) - float64(row[t]-mx))
		}
	})
}

func (c *Device) CrossEntropyBackward(dlogits, logits, targets *tensor.Tensor, scale float32) {
	r, v := tensor.MatDims(logits)
	tensor.CheckLen("CrossEntropyBackward", dlogits, logits)
	ls, ts := read(logits), i32s(targets)
	out := outBuf(dlogits, false)
	c.parallel(r, 8, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := ls[i*v : (i+1)*v]
			orow := out[i*v : (i+1)*v]
			t := int(ts[i])
			if t < 0 {
				clear(orow)
				continue
			}
			mx := float32(math.Inf(-1))
			for _, x := range row {
				mx = max(mx, x)
			}
			var s float32
			for j, x := range row {
				e := expf(x - mx)
				orow[j] = e
				s += e
			}
			inv := scale / s
			for j := range orow {
				orow[j] *= inv
			}
			orow[t] -= scale
		}
	})
	commit(dlogits, out)
}

func (c *Device) ArgMax(out, x *tensor.Tensor) {
	r, cols := tensor.MatDims(x)
	if out.Len() != r {
		panic(fmt.Sprintf("cpu: ArgMax: out %s for %s", out, x))
	}
	xs, os := read(x), i32s(out)
	for i := 0; i < r; i++ {
		row := xs[i*cols : (i+1)*cols]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		os[i] = int32(best)
	}
}

// ---- reductions, scaling, optimizers ----

// sumParallel adds f(x[i]) over x in float64 partial sums.
func (c *Device) sumParallel(xs []float32, f func(float32) float64) float64 {
	parts := make([]float64, c.partsFor(len(xs), 1<<14))
	c.parallelParts(len(xs), 1<<14, func(part, lo, hi int) {
		var s float64
		for _, v := range xs[lo:hi] {
			s += f(v)
		}
		parts[part] = s
	})
	var total float64
	for _, s := range parts {
		total += s
	}
	return total
}

func (c *Device) SumSquares(out, x *tensor.Tensor) {
	s := c.sumParallel(read(x), func(v float32) float64 { return float64(v) * float64(v) })
	f32s(out)[0] += float32(s)
}

// SumSquaresF64 is tensor.SquareSummer: each x's squares in float64 partial sums, added in order.
func (c *Device) SumSquaresF64(xs []*tensor.Tensor) float64 {
	var total float64
	for _, x := range xs {
		total += c.sumParallel(read(x), func(v float32) float64 { return float64(v) * float64(v) })
	}
	return total
}

func (c *Device) Sum(out, x *tensor.Tensor) {
	s := c.sumParallel(read(x), func(v float32) float64 { return float64(v) })
	f32s(out)[0] += float32(s)
}

func (c *Device) UnscaleCheck(x *tensor.Tensor, inv float32, found *tensor.Tensor) {
	xs := f32s(x)
	var mu sync.Mutex
	anyBad := false
	c.parallel(len(xs), 1<<14, func(lo, hi int) {
		b := false
		for i := lo; i < hi; i++ {
			v := xs[i] * inv
			if v-v != 0 { // inf − inf and NaN − NaN are NaN
				b = true
			}
			xs[i] = v
		}
		mu.Lock()
		anyBad = anyBad || b
		mu.Unlock()
	})
	if anyBad {
		f32s(found)[0] = 1
	}
}

// AddBiasGELU is tensor.BiasFolder's: AddBias then GELU (the CPU gains nothing from one pass;
// the model's path through it is the CUDA device's).
func (c *Device) AddBiasGELU(h, g, bias *tensor.Tensor) {
	c.AddBias(h, bias)
	c.GELU(g, h)
}

// AddBiasAdd is tensor.BiasFolder's: y + bias in float32, rounded to y's dtype as AddBias's
// store would round it, then Add's sum — without writing y.
func (c *Device) AddBiasAdd(out, x, y, bias *tensor.Tensor) {
	tensor.CheckLen("AddBiasAdd", out, x, y)
	r, cols := tensor.MatDims(y)
	if bias.Len() != cols {
		panic(fmt.Sprintf("cpu: AddBiasAdd: %s has %d columns, bias %s", y, cols, bias))
	}
	ys, xs, bs := read(y), read(x), read(bias)[:cols]
	ydt, round := y.DType(), isHalf(y.DType())
	os := outBuf(out, false)
	c.parallel(r, max(1, (1<<14)/max(cols, 1)), func(lo, hi int) {
		t := make([]float32, cols)
		var h []uint16
		if round {
			h = make([]uint16, cols)
		}
		for i := lo; i < hi; i++ {
			yr, xr, or := ys[i*cols:(i+1)*cols], xs[i*cols:(i+1)*cols], os[i*cols:(i+1)*cols]
			for j, b := range bs {
				t[j] = yr[j] + b // AddBias's sum
			}
			if round { // AddBias's store into y's dtype
				formatOf(ydt).Encode(h, t)
				formatOf(ydt).Decode(t, h)
			}
			for j := range or {
				or[j] = xr[j] + t[j] // Add's
			}
		}
	})
	commit(out, os)
}

// FoldsBias: the model takes the folds on the CPU device (the same bits), so its path is tested;
// GODDP_BIAS_FOLD=0 turns them off (env.go; a test compares both).
func (c *Device) FoldsBias() bool { return biasFold() }

var _ tensor.BiasFolder = (*Device)(nil)

// GELUBackwardBiasGrad is tensor.GELUBiasGrader: GELUBackward then BiasGrad (the CPU gains nothing
// from one pass; the model's path through it is tested here, the one pass is the CUDA device's).
func (c *Device) GELUBackwardBiasGrad(dx, dy, x, db *tensor.Tensor) {
	c.GELUBackward(dx, dy, x)
	c.BiasGrad(db, dx)
}

// FusesGELUBiasGrad: the model takes GELUBackwardBiasGrad on the CPU device, so its path is tested;
// GODDP_GELU_DB_FOLD=0 turns it off (env.go; a test compares both).
func (c *Device) FusesGELUBiasGrad() bool { return geluDBFold() }

var _ tensor.GELUBiasGrader = (*Device)(nil)

// AddBiasAddLayerNorm is tensor.ResidualNormer: AddBiasAdd then LayerNorm (one pass gains the CPU
// nothing; the model's path through it is tested here, the one pass is the CUDA device's).
func (c *Device) AddBiasAddLayerNorm(out, y2, mean, rstd, x, y, bias, w, b *tensor.Tensor, eps float32) {
	c.AddBiasAdd(out, x, y, bias)
	c.LayerNorm(y2, mean, rstd, out, w, b, eps)
}

// FusesResidualNorm: the model takes AddBiasAddLayerNorm on the CPU device, so its path is tested;
// GODDP_RESNORM_FOLD=0 turns it off (env.go; a test compares both).
func (c *Device) FusesResidualNorm() bool { return resNormFold() }

var _ tensor.ResidualNormer = (*Device)(nil)

// UnscaleCheckSumSquares is tensor.UnscaleSquarer: UnscaleCheck then SumSquares, two passes (the
// CPU gains nothing from one; the trainer's path through it is the CUDA device's).
func (c *Device) UnscaleCheckSumSquares(x *tensor.Tensor, inv float32, found, sq *tensor.Tensor) {
	c.UnscaleCheck(x, inv, found)
	c.SumSquares(sq, x)
}

// FusesUnscaleSquares: the trainer takes UnscaleCheckSumSquares on the CPU device (one read-back
// for the flag and the norm).
func (c *Device) FusesUnscaleSquares() bool { return true }

var _ tensor.UnscaleSquarer = (*Device)(nil)

// CheckUnscaled is tensor.UnscaleFolder: UnscaleCheck's test of each x·inv (rounded to f32 as
// it would store it) and, with sq, SumSquares' float64 partial sums of their squares over the very
// chunks SumSquares takes (sumParallel) — the bits of UnscaleCheck then SumSquares — x unwritten.
func (c *Device) CheckUnscaled(x *tensor.Tensor, inv float32, found, sq *tensor.Tensor) {
	xs := f32s(x)
	if found.DType() != tensor.F32 || found.Len() < 1 || (sq != nil && (sq.DType() != tensor.F32 || sq.Len() < 1)) {
		panic(fmt.Sprintf("cpu: CheckUnscaled: found %s, sq %v", found, sq))
	}
	var bad atomic.Bool
	if sq == nil {
		c.parallel(len(xs), 1<<14, func(lo, hi int) {
			for _, v := range xs[lo:hi] {
				if u := float32(v * inv); u-u != 0 { // inf − inf and NaN − NaN are NaN
					bad.Store(true)
					return
				}
			}
		})
	} else {
		s := c.sumParallel(xs, func(v float32) float64 {
			u := float32(v * inv) // UnscaleCheck's stored value
			if u-u != 0 {
				bad.Store(true)
			}
			return float64(u) * float64(u)
		})
		f32s(sq)[0] += float32(s)
	}
	if bad.Load() {
		f32s(found)[0] = 1
	}
}

// FoldsUnscale is tensor.UnscaleFolder's switch: unless GODDP_UNSCALE_FOLD=0 (env.go), as the
// CUDA device's; AdamW honours AdamWArgs.Unscale either way.
func (c *Device) FoldsUnscale() bool { return unscaleFold() }

var _ tensor.UnscaleFolder = (*Device)(nil)

// GradScaledAdamW: AdamW honours AdamWArgs.GradScale (tensor.GradScaledAdamW).
func (c *Device) GradScaledAdamW() bool { return true }

func (c *Device) AdamW(p, g, m, v, halfW *tensor.Tensor, a tensor.AdamWArgs) {
	tensor.CheckLen("AdamW", p, g, m, v)
	ps, gs, ms, vs := f32s(p), f32s(g), f32s(m), f32s(v)
	var hs []uint16
	var hf half.Format
	if halfW != nil {
		tensor.CheckLen("AdamW", p, halfW)
		hs, hf = h16s(halfW), formatOf(halfW.DType())
	}
	b1, b2, lr, eps, wd := a.Beta1, a.Beta2, a.LR, a.Eps, a.WeightDecay
	ibc1, ibc2 := 1/a.BiasCorr1, 1/a.BiasCorr2
	scaled, gsc := a.GradScale != 0, a.GradScale
	unscaled, us := a.Unscale != 0, a.Unscale
	c.parallel(len(ps), 1<<13, func(lo, hi int) {
		// Slices cut to one length so the loop runs without bounds checks; the f16 copy is a
		// second pass over the chunk while it is still in cache.
		p := ps[lo:hi]
		g, m, v := gs[lo:hi][:len(p)], ms[lo:hi][:len(p)], vs[lo:hi][:len(p)]
		for i, w := range p {
			gi := g[i]
			if unscaled {
				gi = float32(gi * us) // UnscaleCheck's very product (the loss scaler's unscale folded in)
			}
			if scaled {
				gi *= gsc // Scale's very product (gradient clipping folded in)
			}
			mi := b1*m[i] + (1-b1)*gi
			vi := b2*v[i] + (1-b2)*gi*gi
			m[i], v[i] = mi, vi
			denom := float32(math.Sqrt(float64(vi*ibc2))) + eps
			p[i] = w - lr*(mi*ibc1/denom+wd*w)
		}
		if hs != nil {
			hf.Encode(hs[lo:hi], p)
		}
	})
}

func (c *Device) SGD(p, g, mom, halfW *tensor.Tensor, a tensor.SGDArgs) {
	tensor.CheckLen("SGD", p, g)
	ps, gs := f32s(p), f32s(g)
	var ms []float32
	if mom != nil {
		tensor.CheckLen("SGD", p, mom)
		ms = f32s(mom)
	}
	var hs []uint16
	var hf half.Format
	if halfW != nil {
		hs, hf = h16s(halfW), formatOf(halfW.DType())
	}
	mu, lr, wd := a.Momentum, a.LR, a.WeightDecay
	c.parallel(len(ps), 1<<13, func(lo, hi int) {
		// One loop per case, with the slices re-cut to one length so the compiler drops the
		// bounds checks: the per-element tests were 4x the cost of the arithmetic.
		p, g := ps[lo:hi], gs[lo:hi]
		g = g[:len(p)]
		switch {
		case ms == nil || mu == 0:
			for i := range p {
				p[i] -= lr * (g[i] + wd*p[i])
			}
		case a.Nesterov:
			m := ms[lo:hi][:len(p)]
			for i := range p {
				d := g[i] + wd*p[i]
				m[i] = mu*m[i] + d
				p[i] -= lr * (d + mu*m[i])
			}
		default:
			m := ms[lo:hi][:len(p)]
			for i := range p {
				m[i] = mu*m[i] + g[i] + wd*p[i]
				p[i] -= lr * m[i]
			}
		}
		if hs != nil {
			hf.Encode(hs[lo:hi], p)
		}
	})
}

// AddReLU and AddReLUBackward are tensor.AddReLUDevice's, as the two passes they fuse on a GPU
// (the same bits by construction): here they let the ResNet's fused wiring run on the CPU.
func (c *Device) AddReLU(out, a, b *tensor.Tensor) {
	c.Add(out, a, b)
	c.ReLU(out, out)
}

func (c *Device) AddReLUBackward(dx, a, y *tensor.Tensor) {
	c.Axpy(dx, 1, a)
	c.ReLUBackward(dx, dx, y)
}
