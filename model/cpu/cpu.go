package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// Device is the plain-Go device: every operation runs on the calling goroutine's behalf across
// runtime.GOMAXPROCS worker goroutines and is finished when it returns (so Sync is a no-op).
// Memory comes from Go slices through the caching Pool, so its counters mean the same as on the GPU.
type Device struct {
	*tensor.Pool // memory: Alloc, Free, Stats, ResetPeak, SetLimit, EmptyCache, Live, SetObserver
	threads      int
}

var (
	_ tensor.Device     = (*Device)(nil)
	_ tensor.Observable = (*Device)(nil)
)

// cpuBuf is one block: float32 words, seen as f16, bf16 or i32 through unsafe views.
type cpuBuf struct {
	w []float32
}

func (b *cpuBuf) Bytes() int64 { return int64(len(b.w)) * 4 }

// New makes a CPU device using all of GOMAXPROCS.
func New() *Device {
	c := &Device{threads: runtime.GOMAXPROCS(0)}
	c.Pool = tensor.NewPool(c,
		func(n int64) (tensor.Buffer, error) { return &cpuBuf{w: make([]float32, (n+3)/4)}, nil },
		func(tensor.Buffer) {})
	return c
}

func (c *Device) Name() string { return "cpu" }

// Sync has nothing to wait for: every operation is done when it returns.
func (c *Device) Sync() {}

// Fence is done when made, for the same reason.
func (c *Device) Fence() tensor.Fence { return doneFence{} }

// doneFence is a fence with nothing to wait for.
type doneFence struct{}

func (doneFence) Wait()      {}
func (doneFence) Done() bool { return true }

// ---- element access (device-internal) ----

func words(t *tensor.Tensor) []float32 {
	if t.Buffer() == nil {
		panic(fmt.Sprintf("cpu: use of freed tensor %s", t))
	}
	return t.Buffer().(*cpuBuf).w
}

// f32s is t's elements when t is f32.
func f32s(t *tensor.Tensor) []float32 {
	if t.DType() != tensor.F32 {
		panic(fmt.Sprintf("cpu: %s is not f32", t))
	}
	return words(t)[t.Offset() : t.Offset()+t.Len()]
}

// isHalf reports a 16-bit float dtype (f16 or bf16): stored as uint16s, computed in float32.
func isHalf(d tensor.DType) bool { return d == tensor.F16 || d == tensor.BF16 }

// formatOf is the half format of a 16-bit float dtype.
func formatOf(d tensor.DType) half.Format {
	if d == tensor.BF16 {
		return half.BF16
	}
	return half.F16
}

// h16s is t's elements when t is f16 or bf16 (formatOf(t.DType()) says which).
func h16s(t *tensor.Tensor) []uint16 {
	if !isHalf(t.DType()) {
		panic(fmt.Sprintf("cpu: %s is not f16 or bf16", t))
	}
	w := words(t)
	all := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*2)
	return all[t.Offset() : t.Offset()+t.Len()]
}

func i32s(t *tensor.Tensor) []int32 {
	if t.DType() != tensor.I32 {
		panic(fmt.Sprintf("cpu: %s is not i32", t))
	}
	w := words(t)
	all := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
	return all[t.Offset() : t.Offset()+t.Len()]
}

// read returns t's elements as float32: t's own memory when f32 (do not write it unless t is the
// output), a converted copy when f16 or bf16.
func read(t *tensor.Tensor) []float32 {
	switch d := t.DType(); {
	case d == tensor.F32:
		return f32s(t)
	case isHalf(d):
		out := make([]float32, t.Len())
		formatOf(d).Decode(out, h16s(t))
		return out
	}
	panic(fmt.Sprintf("cpu: %s is not a float tensor", t))
}

// out returns a float32 slice to write t's result into; commit stores it (rounding to nearest
// even when t is f16 or bf16). When t is f32 the slice is t's memory and commit does nothing.
// keep loads t's current values (for accumulating outputs).
func outBuf(t *tensor.Tensor, keep bool) []float32 {
	switch d := t.DType(); {
	case d == tensor.F32:
		return f32s(t)
	case isHalf(d):
		if keep {
			return read(t)
		}
		return make([]float32, t.Len())
	}
	panic(fmt.Sprintf("cpu: %s is not a float tensor", t))
}

func commit(t *tensor.Tensor, v []float32) {
	if d := t.DType(); isHalf(d) {
		formatOf(d).Encode(h16s(t), v)
	}
}

// parallel runs body over [0,n) split into chunks of at least grain items across the threads.
func (c *Device) parallel(n, grain int, body func(lo, hi int)) {
	c.parallelParts(n, grain, func(_, lo, hi int) { body(lo, hi) })
}

// partsFor is how many chunks parallelParts cuts n items into.
func (c *Device) partsFor(n, grain int) int {
	if grain < 1 {
		grain = 1
	}
	return max(1, min(c.threads, (n+grain-1)/grain))
}

// parallelParts is parallel with the chunk's index (0 ≤ part < partsFor(n, grain)), so reductions
// can keep one partial per chunk and combine them in a fixed order: results do not depend on timing.
func (c *Device) parallelParts(n, grain int, body func(part, lo, hi int)) {
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

func (c *Device) Upload(dst *tensor.Tensor, src []float32) {
	if len(src) != dst.Len() {
		panic(fmt.Sprintf("cpu: Upload of %d values into %s", len(src), dst))
	}
	switch d := dst.DType(); {
	case d == tensor.F32:
		copy(f32s(dst), src)
	case isHalf(d):
		formatOf(d).Encode(h16s(dst), src)
	default:
		panic(fmt.Sprintf("cpu: Upload into %s", dst))
	}
}

func (c *Device) UploadI32(dst *tensor.Tensor, src []int32) {
	if len(src) != dst.Len() {
		panic(fmt.Sprintf("cpu: UploadI32 of %d values into %s", len(src), dst))
	}
	copy(i32s(dst), src)
}

func (c *Device) Download(dst []float32, src *tensor.Tensor) {
	if len(dst) != src.Len() {
		panic(fmt.Sprintf("cpu: Download of %s into %d values", src, len(dst)))
	}
	switch d := src.DType(); {
	case d == tensor.F32:
		copy(dst, f32s(src))
	case isHalf(d):
		formatOf(d).Decode(dst, h16s(src))
	case d == tensor.I32:
		for i, v := range i32s(src) {
			dst[i] = float32(v)
		}
	}
}

func (c *Device) DownloadI32(dst []int32, src *tensor.Tensor) {
	if len(dst) != src.Len() {
		panic(fmt.Sprintf("cpu: DownloadI32 of %s into %d values", src, len(dst)))
	}
	copy(dst, i32s(src))
}

// ---- fills, copies, elementwise ----

func (c *Device) Fill(t *tensor.Tensor, v float32) {
	switch d := t.DType(); {
	case d == tensor.F32:
		x := f32s(t)
		for i := range x {
			x[i] = v
		}
	case isHalf(d):
		h := formatOf(d).FromFloat32(v)
		x := h16s(t)
		for i := range x {
			x[i] = h
		}
	case d == tensor.I32:
		x := i32s(t)
		for i := range x {
			x[i] = int32(v)
		}
	}
}

func (c *Device) Copy(dst, src *tensor.Tensor) {
	tensor.CheckLen("Copy", dst, src)
	dd, sd := dst.DType(), src.DType()
	switch {
	case dd == sd && dd == tensor.F32:
		copy(f32s(dst), f32s(src))
	case dd == sd && isHalf(dd):
		copy(h16s(dst), h16s(src))
	case dd == sd && dd == tensor.I32:
		copy(i32s(dst), i32s(src))
	case isHalf(dd) && sd == tensor.F32:
		d, s, f := h16s(dst), f32s(src), formatOf(dd)
		c.parallel(len(s), 1<<15, func(lo, hi int) { f.Encode(d[lo:hi], s[lo:hi]) })
	case dd == tensor.F32 && isHalf(sd):
		d, s, f := f32s(dst), h16s(src), formatOf(sd)
		c.parallel(len(s), 1<<15, func(lo, hi int) { f.Decode(d[lo:hi], s[lo:hi]) })
	case isHalf(dd) && isHalf(sd): // f16 ↔ bf16 through f32 (widening is exact; one rounding)
		d, s, fd, fs := h16s(dst), h16s(src), formatOf(dd), formatOf(sd)
		c.parallel(len(s), 1<<15, func(lo, hi int) {
			w := make([]float32, hi-lo)
			fs.Decode(w, s[lo:hi])
			fd.Encode(d[lo:hi], w)
		})
	default:
		panic(fmt.Sprintf("cpu: Copy %s into %s", src, dst))
	}
}

func (c *Device) RandNormal(t *tensor.Tensor, std float32, seed uint64) {
	v := outBuf(t, false)
	c.parallel(len(v), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] = std * tensor.Normal(seed, uint64(i))
		}
	})
	commit(t, v)
}

func (c *Device) Scale(t *tensor.Tensor, s float32) {
	v := outBuf(t, true)
	c.parallel(len(v), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] *= s
		}
	})
	commit(t, v)
}

func (c *Device) Axpy(y *tensor.Tensor, alpha float32, x *tensor.Tensor) {
	tensor.CheckLen("Axpy", y, x)
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

func (c *Device) Add(out, a, b *tensor.Tensor) {
	tensor.CheckLen("Add", out, a, b)
	as, bs := read(a), read(b)
	os := outBuf(out, false)
	c.parallel(len(os), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			os[i] = as[i] + bs[i]
		}
	})
	commit(out, os)
}
