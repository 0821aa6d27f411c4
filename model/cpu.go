package model

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/goddp/goddp/model/half"
)

// CPU is the plain-Go device: every operation runs on the calling goroutine's behalf across
// runtime.GOMAXPROCS worker goroutines and is finished when it returns (so Sync is a no-op).
// Memory comes from Go slices through the caching Pool, so its counters mean the same as on the GPU.
type CPU struct {
	*Pool   // memory: Alloc, Free, Stats, ResetPeak, SetLimit, EmptyCache, Live, SetObserver
	threads int
}

var (
	_ Device     = (*CPU)(nil)
	_ Observable = (*CPU)(nil)
)

// cpuBuf is one block: float32 words, seen as f16 or i32 through unsafe views.
type cpuBuf struct {
	w []float32
}

func (b *cpuBuf) Bytes() int64 { return int64(len(b.w)) * 4 }

// NewCPU makes a CPU device using all of GOMAXPROCS.
func NewCPU() *CPU {
	c := &CPU{threads: runtime.GOMAXPROCS(0)}
	c.Pool = NewPool(c,
		func(n int64) (Buffer, error) { return &cpuBuf{w: make([]float32, (n+3)/4)}, nil },
		func(Buffer) {})
	return c
}

func (c *CPU) Name() string { return "cpu" }

// Sync has nothing to wait for: every operation is done when it returns.
func (c *CPU) Sync() {}

// ---- element access (device-internal) ----

func words(t *Tensor) []float32 {
	if t.buf == nil {
		panic(fmt.Sprintf("model: use of freed tensor %s", t))
	}
	return t.buf.(*cpuBuf).w
}

// f32s is t's elements when t is f32.
func f32s(t *Tensor) []float32 {
	if t.dtype != F32 {
		panic(fmt.Sprintf("model: %s is not f32", t))
	}
	return words(t)[t.off : t.off+t.n]
}

func f16s(t *Tensor) []uint16 {
	if t.dtype != F16 {
		panic(fmt.Sprintf("model: %s is not f16", t))
	}
	w := words(t)
	all := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*2)
	return all[t.off : t.off+t.n]
}

func i32s(t *Tensor) []int32 {
	if t.dtype != I32 {
		panic(fmt.Sprintf("model: %s is not i32", t))
	}
	w := words(t)
	all := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
	return all[t.off : t.off+t.n]
}

// read returns t's elements as float32: t's own memory when f32 (do not write it unless t is the
// output), a converted copy when f16.
func read(t *Tensor) []float32 {
	switch t.dtype {
	case F32:
		return f32s(t)
	case F16:
		out := make([]float32, t.n)
		half.Decode(out, f16s(t))
		return out
	}
	panic(fmt.Sprintf("model: %s is not a float tensor", t))
}

// out returns a float32 slice to write t's result into; commit stores it (rounding to f16 when t is
// f16). When t is f32 the slice is t's memory and commit does nothing. keep loads t's current
// values (for accumulating outputs).
func outBuf(t *Tensor, keep bool) []float32 {
	switch t.dtype {
	case F32:
		return f32s(t)
	case F16:
		if keep {
			return read(t)
		}
		return make([]float32, t.n)
	}
	panic(fmt.Sprintf("model: %s is not a float tensor", t))
}

func commit(t *Tensor, v []float32) {
	if t.dtype == F16 {
		half.Encode(f16s(t), v)
	}
}

func checkLen(op string, ts ...*Tensor) {
	for _, t := range ts[1:] {
		if t.n != ts[0].n {
			panic(fmt.Sprintf("model: %s: %s and %s differ in size", op, ts[0], t))
		}
	}
}

// parallel runs body over [0,n) split into chunks of at least grain items across the threads.
func (c *CPU) parallel(n, grain int, body func(lo, hi int)) {
	c.parallelParts(n, grain, func(_, lo, hi int) { body(lo, hi) })
}

// partsFor is how many chunks parallelParts cuts n items into.
func (c *CPU) partsFor(n, grain int) int {
	if grain < 1 {
		grain = 1
	}
	return max(1, min(c.threads, (n+grain-1)/grain))
}

// parallelParts is parallel with the chunk's index (0 ≤ part < partsFor(n, grain)), so reductions
// can keep one partial per chunk and combine them in a fixed order: results do not depend on timing.
func (c *CPU) parallelParts(n, grain int, body func(part, lo, hi int)) {
	parts := c.partsFor(n, grain)
	if parts <= 1 {
		body(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + parts - 1) / parts
	for p := 0; p < parts; p++ {
		lo, hi := p*step, min((p+1)*step, n)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(p, lo, hi)
		}()
	}
	wg.Wait()
}

// ---- host transfer ----

func (c *CPU) Upload(dst *Tensor, src []float32) {
	if len(src) != dst.n {
		panic(fmt.Sprintf("model: Upload of %d values into %s", len(src), dst))
	}
	switch dst.dtype {
	case F32:
		copy(f32s(dst), src)
	case F16:
		half.Encode(f16s(dst), src)
	default:
		panic(fmt.Sprintf("model: Upload into %s", dst))
	}
}

func (c *CPU) UploadI32(dst *Tensor, src []int32) {
	if len(src) != dst.n {
		panic(fmt.Sprintf("model: UploadI32 of %d values into %s", len(src), dst))
	}
	copy(i32s(dst), src)
}

func (c *CPU) Download(dst []float32, src *Tensor) {
	if len(dst) != src.n {
		panic(fmt.Sprintf("model: Download of %s into %d values", src, len(dst)))
	}
	switch src.dtype {
	case F32:
		copy(dst, f32s(src))
	case F16:
		half.Decode(dst, f16s(src))
	case I32:
		for i, v := range i32s(src) {
			dst[i] = float32(v)
		}
	}
}

func (c *CPU) DownloadI32(dst []int32, src *Tensor) {
	if len(dst) != src.n {
		panic(fmt.Sprintf("model: DownloadI32 of %s into %d values", src, len(dst)))
	}
	copy(dst, i32s(src))
}

// ---- fills, copies, elementwise ----

func (c *CPU) Fill(t *Tensor, v float32) {
	switch t.dtype {
	case F32:
		x := f32s(t)
		for i := range x {
			x[i] = v
		}
	case F16:
		h := half.FromFloat32(v)
		x := f16s(t)
		for i := range x {
			x[i] = h
		}
	case I32:
		x := i32s(t)
		for i := range x {
			x[i] = int32(v)
		}
	}
}

func (c *CPU) Copy(dst, src *Tensor) {
	checkLen("Copy", dst, src)
	switch {
	case dst.dtype == src.dtype && dst.dtype == F32:
		copy(f32s(dst), f32s(src))
	case dst.dtype == src.dtype && dst.dtype == F16:
		copy(f16s(dst), f16s(src))
	case dst.dtype == src.dtype && dst.dtype == I32:
		copy(i32s(dst), i32s(src))
	case dst.dtype == F16 && src.dtype == F32:
		d, s := f16s(dst), f32s(src)
		c.parallel(len(s), 1<<15, func(lo, hi int) { half.Encode(d[lo:hi], s[lo:hi]) })
	case dst.dtype == F32 && src.dtype == F16:
		d, s := f32s(dst), f16s(src)
		c.parallel(len(s), 1<<15, func(lo, hi int) { half.Decode(d[lo:hi], s[lo:hi]) })
	default:
		panic(fmt.Sprintf("model: Copy %s into %s", src, dst))
	}
}

func (c *CPU) RandNormal(t *Tensor, std float32, seed uint64) {
	v := outBuf(t, false)
	c.parallel(len(v), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] = std * Normal(seed, uint64(i))
		}
	})
	commit(t, v)
}

func (c *CPU) Scale(t *Tensor, s float32) {
	v := outBuf(t, true)
	c.parallel(len(v), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] *= s
		}
	})
	commit(t, v)
}

func (c *CPU) Axpy(y *Tensor, alpha float32, x *Tensor) {
	checkLen("Axpy", y, x)
	xs := read(x)
	ys := outBuf(y, true)
	c.parallel(len(ys), 1<<14, func(lo, hi int) {
		xs, ys := xs[lo:hi], ys[lo:hi]
		for i := range ys {
			ys[i] += alpha * xs[i]
		}
	})
	commit(y, ys)
}

func (c *CPU) Add(out, a, b *Tensor) {
	checkLen("Add", out, a, b)
	as, bs := read(a), read(b)
	os := outBuf(out, false)
	c.parallel(len(os), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			os[i] = as[i] + bs[i]
		}
	})
	commit(out, os)
}
