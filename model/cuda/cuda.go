//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
	"gorgonia.org/cu"
)

// Device is the NVIDIA GPU device. gorgonia.org/cu drives the driver API (device, primary context,
// memory, NVRTC); launches, streams, copies and cuBLAS go through goddp's own small cgo layer
// (package cudadrv), because they sit on the hot path and need raw handles.
//
// Threading: a CUDA context is current per OS thread. Every method locks the calling goroutine to
// its OS thread for the duration of the call and makes the device's context current there
// (cuCtxSetCurrent is a thread-local store), then unlocks. So any single goroutine may drive the
// device, as tensor.Device's contract says, with no hop to a dedicated goroutine per operation.
// Work is enqueued on one compute stream in call order; only Download, DownloadI32, Sync and a
// Fence's Wait wait.
//
// Memory: blocks come from cuMemAlloc through the shared caching Pool. A freed block may be handed
// to the next Alloc at once even if queued kernels still read it: every kernel runs on the compute
// stream, in order, so the earlier reader finishes first. (Work on the copy stream must order
// itself with events, as CopyToPinned does.) EmptyCache synchronises before cuMemFree.
type Device struct {
	*tensor.Pool // memory: Alloc, Free, Stats, ResetPeak, SetLimit, EmptyCache, Live, SetObserver

	ordinal int
	dev     cu.Device
	ctx     cu.CUContext
	name    string
	major   int
	minor   int
	sms     int

	stream  cudadrv.Stream // compute
	copyS   cudadrv.Stream // copies to and from pinned host memory
	module  cudadrv.Module
	flashM  cudadrv.Module // fused attention (flash.go); loaded when flash is true
	flash   bool
	flashWG flashWGKernels // the Hopper attention's modules (flash_wgmma.go), each loaded at its first use
	// flashRows is the fused forward's block of query rows: 0 or 64 k_flash_fwd, 128
	// k_flash_fwd128 (SetFlashForwardRows, model.flash_forward_rows).
	flashRows int
	// flashOpts are the attention module's extra NVRTC options (flashOptions: the grid's order,
	// the register budgets), the f16 and bf16 modules alike; flashTileMajor is the grid's order.
	flashOpts      []string
	flashTileMajor bool
	// pdl: the kernels of the modules launch reaches are compiled to wait for the grid before
	// them and launched with programmatic dependent launch (GODDP_PDL=1, pdl.go).
	pdl       bool
	conv      *convState // cuDNN and the convolution kernels (conv.go; nil without the cudnn tag)
	fns       map[string]cudadrv.Function
	dynShared map[string]int // the dynamic shared memory each kernel that asks for more than 48 KiB was allowed (allowDynShared)
	bf16      bf16Kernels    // bf16 instantiations, loaded on first use (bf16.go)
	bf16Once  sync.Once
	blas      *cudadrv.Blas
	lt        *ltState   // cublasLt's fused epilogues (lt.go), made on first use
	mu        sync.Mutex // guards nothing on the hot path; held by Close
	closed    bool

	evMu   sync.Mutex      // guards evFree: fences are spent on any goroutine (fence.go)
	evFree []cudadrv.Event // events of spent fences, recorded again by the next Fence

	prof []profEntry // when profiling: one event pair per kernel or GEMM
	pOn  bool

	// ipcAbortS carries the stream-paced IPC reducers' aborts (their flags' snapshot and
	// releases, ipc_pace.go): one stream for the device, made by its first paced reducer, so the
	// device's streams stay fewer than the hardware's queues (CUDA_DEVICE_MAX_CONNECTIONS).
	ipcAbortMu      sync.Mutex
	ipcAbortS       cudadrv.Stream
	ipcAbortOK      bool
	ipcPacedAborted atomic.Bool // a paced reducer was aborted: side streams' Close is bounded

	colsumCnt uint64 // k_colsum_partfin's counters (colsumCounters), colsumN of them
	colsumN   int
}

type profEntry struct {
	name string
	a, b cudadrv.Event
	host time.Duration // the host's time from the start event to the end event's record
}

var (
	_ tensor.Device         = (*Device)(nil)
	_ tensor.Observable     = (*Device)(nil)
	_ tensor.ComputeChecker = (*Device)(nil)
)

// cudaBuf is one cuMemAlloc block.
type cudaBuf struct {
	ptr   uint64
	bytes int64
}

func (b *cudaBuf) Bytes() int64 { return b.bytes }

// must panics on a failed driver call: at that point the context is usually unusable, and ops have
// no error results (tensor.Device: programming errors panic).
func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("cuda: %v", err))
	}
}

// New opens GPU ordinal, retains its primary context, creates the compute and copy streams and
// the cuBLAS handle, and compiles (or loads from the disk cache) the kernels.
func New(ordinal int) (*Device, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := checkEnv(os.Getenv); err != nil { // a mistyped switch, named (env_check.go)
		return nil, err
	}
	if err := streamConnections(); err != nil {
		return nil, err
	}
	if err := cudadrv.Init(); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d asked for, %d present", ordinal, n)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	d := &Device{ordinal: ordinal, dev: dev, fns: map[string]cudadrv.Function{}, dynShared: map[string]int{}}
	if d.name, err = dev.Name(); err != nil {
		return nil, fmt.Errorf("cuda: device %d name: %w", ordinal, err)
	}
	if d.major, err = dev.Attribute(cu.ComputeCapabilityMajor); err != nil {
		return nil, err
	}
	if d.minor, err = dev.Attribute(cu.ComputeCapabilityMinor); err != nil {
		return nil, err
	}
	if d.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, err
	}
	if d.pdl = pdlFor(pdlValue(), d.major, cudadrv.PDLSupported()); d.pdl && (d.major < 9 || !cudadrv.PDLSupported()) {
		lx := map[bool]string{false: "missing", true: "present"}[cudadrv.PDLSupported()]
		return nil, fmt.Errorf("cuda: GODDP_PDL=1: programmatic dependent launch needs compute capability 9.0 or later (griddepcontrol; %s is sm_%d%d) and goddp built against CUDA 12 with a CUDA 12 driver (cuLaunchKernelEx: %s)",
			d.name, d.major, d.minor, lx)
	}
	if d.ctx, err = dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("cuda: primary context of device %d: %w", ordinal, err)
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return nil, fmt.Errorf("cuda: making the context current: %w", err)
	}
	if d.stream, err = cudadrv.NewStream(); err != nil {
		return nil, fmt.Errorf("cuda: compute stream: %w", err)
	}
	if d.copyS, err = cudadrv.NewStream(); err != nil {
		return nil, fmt.Errorf("cuda: copy stream: %w", err)
	}
	if d.blas, err = cudadrv.NewBlas(d.stream); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if err := d.loadKernels(); err != nil {
		return nil, err
	}
	if err := d.loadFlash(); err != nil {
		return nil, err
	}
	if err := d.initConv(); err != nil {
		return nil, err
	}
	d.Pool = tensor.NewPool(d, d.rawAlloc, d.rawFree)
	d.SetFreeOnCard(func() int64 { f, _ := d.MemInfo(); return f })
	return d, nil
}

// enter locks the goroutine to its thread and makes the context current; leave undoes the lock.
func (d *Device) enter() {
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		runtime.UnlockOSThread()
		panic(fmt.Sprintf("cuda: making the context current: %v", err))
	}
}

func (d *Device) leave() { runtime.UnlockOSThread() }

// Name is "cuda:N".
func (d *Device) Name() string { return fmt.Sprintf("cuda:%d", d.ordinal) }

// DeviceName is the card's marketing name, e.g. "NVIDIA H200".
func (d *Device) DeviceName() string { return d.name }

// Arch is the compute capability as major·10+minor (90 on Hopper).
func (d *Device) Arch() int { return d.major*10 + d.minor }

// MemInfo returns the card's free and total memory in bytes (cuMemGetInfo).
func (d *Device) MemInfo() (free, total int64) {
	d.enter()
	defer d.leave()
	f, t, err := cudadrv.MemInfo()
	if err != nil {
		return -1, -1
	}
	return f, t
}

// Close synchronises, drops the cache, and releases streams, cuBLAS and the module. Live tensors
// become invalid.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.Sync()
	d.EmptyCache()
	d.enter()
	defer d.leave()
	d.blas.Destroy()
	d.closeConv()
	d.closeLt()
	d.module.Unload()
	d.closeBF16()
	if d.flash {
		d.flashM.Unload()
	}
	d.closeFlashWG()
	d.evMu.Lock()
	for _, e := range d.evFree {
		e.Destroy()
	}
	d.evFree = nil
	d.evMu.Unlock()
	if d.colsumCnt != 0 {
		_ = cudadrv.MemFree(d.colsumCnt)
		d.colsumCnt, d.colsumN = 0, 0
	}
	d.stream.Destroy()
	d.copyS.Destroy()
	d.ipcAbortMu.Lock()
	if d.ipcAbortOK {
		d.ipcAbortS.Destroy()
		d.ipcAbortOK = false
	}
	d.ipcAbortMu.Unlock()
	return d.dev.ReleasePrimaryCtx()
}

// ---- memory ----

func (d *Device) rawAlloc(n int64) (tensor.Buffer, error) {
	d.enter()
	defer d.leave()
	p, err := cudadrv.MemAlloc(n)
	if err != nil {
		return nil, err
	}
	return &cudaBuf{ptr: p, bytes: n}, nil
}

func (d *Device) rawFree(b tensor.Buffer) {
	d.enter()
	defer d.leave()
	// Queued work may still use a cached block only if it was freed after being handed to an
	// op; make sure that work is done before the memory goes back to the driver.
	must(d.stream.Sync())
	must(d.copyS.Sync())
	must(cudadrv.MemFree(b.(*cudaBuf).ptr))
}

// scratch is a temporary f32 buffer for multi-pass kernels. Release it right after enqueueing the
// kernels that use it: stream order keeps it alive for them.
func (d *Device) scratch(n int) *tensor.Tensor { return d.Alloc(tensor.F32, "cuda.scratch", n) }

// dptr is the device address of t's first element.
func dptr(t *tensor.Tensor) uint64 {
	if t.Buffer() == nil {
		panic(fmt.Sprintf("cuda: use of freed tensor %s", t))
	}
	b, ok := t.Buffer().(*cudaBuf)
	if !ok {
		panic(fmt.Sprintf("cuda: %s does not live on a CUDA device", t))
	}
	return b.ptr + uint64(t.Offset())*uint64(t.DType().Size())
}

// ---- host transfer ----

func (d *Device) Upload(dst *tensor.Tensor, src []float32) {
	if len(src) != dst.Len() {
		panic(fmt.Sprintf("cuda: Upload of %d values into %s", len(src), dst))
	}
	if dst.Len() == 0 {
		return
	}
	switch dst.DType() {
	case tensor.F32:
		d.htod(dst, unsafe.Pointer(&src[0]), dst.Bytes())
	case tensor.F16:
		h := make([]uint16, len(src))
		half.Encode(h, src)
		d.htod(dst, unsafe.Pointer(&h[0]), dst.Bytes())
	case tensor.BF16:
		h := make([]uint16, len(src))
		half.EncodeBF16(h, src)
		d.htod(dst, unsafe.Pointer(&h[0]), dst.Bytes())
	default:
		panic(fmt.Sprintf("cuda: Upload into %s", dst))
	}
}

func (d *Device) UploadI32(dst *tensor.Tensor, src []int32) {
	if len(src) != dst.Len() || dst.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: UploadI32 of %d values into %s", len(src), dst))
	}
	if dst.Len() > 0 {
		d.htod(dst, unsafe.Pointer(&src[0]), dst.Bytes())
	}
}

// htod copies from pageable host memory on the compute stream. For pageable memory the driver
// stages the source before returning, so the Go slice may be reused as soon as this returns.
func (d *Device) htod(dst *tensor.Tensor, src unsafe.Pointer, n int64) {
	d.enter()
	defer d.leave()
	must(cudadrv.HtoD(dptr(dst), src, n, d.stream))
}

func (d *Device) dtoh(dst unsafe.Pointer, src *tensor.Tensor) {
	d.enter()
	defer d.leave()
	must(cudadrv.DtoH(dst, dptr(src), src.Bytes(), d.stream))
	must(d.stream.Sync())
}

func (d *Device) Download(dst []float32, src *tensor.Tensor) {
	if len(dst) != src.Len() {
		panic(fmt.Sprintf("cuda: Download of %s into %d values", src, len(dst)))
	}
	if src.Len() == 0 {
		d.Sync()
		return
	}
	switch src.DType() {
	case tensor.F32:
		d.dtoh(unsafe.Pointer(&dst[0]), src)
	case tensor.F16:
		h := make([]uint16, src.Len())
		d.dtoh(unsafe.Pointer(&h[0]), src)
		half.Decode(dst, h)
	case tensor.BF16:
		h := make([]uint16, src.Len())
		d.dtoh(unsafe.Pointer(&h[0]), src)
		half.DecodeBF16(dst, h)
	case tensor.I32:
		v := make([]int32, src.Len())
		d.dtoh(unsafe.Pointer(&v[0]), src)
		for i, x := range v {
			dst[i] = float32(x)
		}
	}
}

func (d *Device) DownloadI32(dst []int32, src *tensor.Tensor) {
	if len(dst) != src.Len() || src.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: DownloadI32 of %s into %d values", src, len(dst)))
	}
	if src.Len() > 0 {
		d.dtoh(unsafe.Pointer(&dst[0]), src)
	}
}

// Sync waits for the compute and copy streams.
func (d *Device) Sync() {
	d.enter()
	defer d.leave()
	must(d.stream.Sync())
	must(d.copyS.Sync())
}

// ---- pinned host staging (for the DDP engine) ----

// Pinned is page-locked host memory from cuMemHostAlloc: copies between it and the GPU run
// asynchronously at full PCIe speed. Free it with Free.
type Pinned struct {
	d     *Device
	p     unsafe.Pointer
	bytes int64
}

// HostAlloc returns bytes of pinned host memory.
func (d *Device) HostAlloc(bytes int64) (*Pinned, error) {
	d.enter()
	defer d.leave()
	p, err := cudadrv.HostAlloc(bytes)
	if err != nil {
		return nil, fmt.Errorf("cuda: pinned memory of %s: %w", tensor.FormatBytes(bytes), err)
	}
	return &Pinned{d: d, p: p, bytes: bytes}, nil
}

// Bytes is the buffer's size.
func (p *Pinned) Bytes() int64 { return p.bytes }

// F32 views the buffer as float32s. U16 views it as uint16s (f16 bits).
func (p *Pinned) F32() []float32 { return unsafe.Slice((*float32)(p.p), p.bytes/4) }
func (p *Pinned) U16() []uint16  { return unsafe.Slice((*uint16)(p.p), p.bytes/2) }

// Free releases the pinned memory.
func (p *Pinned) Free() {
	if p.p == nil {
		return
	}
	p.d.enter()
	defer p.d.leave()
	cudadrv.HostFree(p.p)
	p.p = nil
}

// CopyToPinned copies src's bytes into dst at byte offset off on the copy stream, after all work
// enqueued so far on the compute stream (an event orders them). It returns at once; call wait
// before reading dst.
func (d *Device) CopyToPinned(dst *Pinned, off int64, src *tensor.Tensor) (wait func()) {
	if off < 0 || off+src.Bytes() > dst.bytes {
		panic(fmt.Sprintf("cuda: CopyToPinned: %s at %d does not fit %s", src, off, tensor.FormatBytes(dst.bytes)))
	}
	d.enter()
	defer d.leave()
	ev, err := cudadrv.NewEvent(false)
	must(err)
	must(ev.Record(d.stream))
	must(d.copyS.Wait(ev))
	must(cudadrv.DtoH(unsafe.Add(dst.p, off), dptr(src), src.Bytes(), d.copyS))
	must(ev.Record(d.copyS))
	return func() {
		d.enter()
		defer d.leave()
		must(ev.Sync())
		ev.Destroy()
	}
}

// CopyFromPinned copies bytes of src at byte offset off into dst on the compute stream (so later
// ops see them). The host must not change src until the device has synchronised past this copy.
func (d *Device) CopyFromPinned(dst *tensor.Tensor, src *Pinned, off int64) {
	if off < 0 || off+dst.Bytes() > src.bytes {
		panic(fmt.Sprintf("cuda: CopyFromPinned: %s at %d does not fit %s", dst, off, tensor.FormatBytes(src.bytes)))
	}
	d.enter()
	defer d.leave()
	must(cudadrv.HtoD(dptr(dst), unsafe.Add(src.p, off), dst.Bytes(), d.stream))
}

// ---- kernel launches ----

// launch enqueues kernel name on the compute stream. Each argument is one 8-byte slot: pointers
// from dptr, 32-bit values through i32/f32 helpers, 64-bit counts as uint64.
func (d *Device) launch(name string, grid, block [3]int, shmem int, args ...uint64) {
	f, ok := d.fn(name)
	if !ok {
		panic(fmt.Sprintf("cuda: no kernel %q", name))
	}
	if len(args) > cudadrv.MaxArgs {
		panic("cuda: too many kernel arguments")
	}
	var vals [cudadrv.MaxArgs]uint64
	copy(vals[:], args)
	d.enter()
	defer d.leave()
	end := d.profBegin(name)
	var err error
	if d.pdl {
		err = cudadrv.LaunchPDL(f, grid, block, shmem, d.stream, &vals, len(args))
	} else {
		err = cudadrv.Launch(f, grid, block, shmem, d.stream, &vals, len(args))
	}
	if err != nil {
		panic(fmt.Sprintf("cuda: launching %s grid %v block %v: %v", name, grid, block, err))
	}
	end()
}

// compileLaunched is compileCached for a module whose kernels launch runs: src itself, or with
// GODDP_PDL=1 src with every kernel opening on the wait for the grid before it (pdlSource).
func (d *Device) compileLaunched(src string, opts []string) (string, error) {
	if d.pdl {
		var err error
		if src, _, err = pdlSource(src); err != nil {
			return "", err
		}
	}
	return compileCached(src, opts)
}

// ---- profiling (diagnostics: events around every kernel and GEMM) ----

// ProfileStart starts timing every kernel and GEMM with a pair of events (slow: for finding where
// a step's time goes, not for timing the step).
func (d *Device) ProfileStart() { d.pOn = true }

// profBegin records a start event when profiling and returns the function that records the end.
// The caller holds the thread (enter).
func (d *Device) profBegin(name string) func() {
	if !d.pOn {
		return func() {}
	}
	a, err := cudadrv.NewEvent(true)
	must(err)
	b, err := cudadrv.NewEvent(true)
	must(err)
	must(a.Record(d.stream))
	t0 := time.Now()
	return func() {
		host := time.Since(t0)
		must(b.Record(d.stream))
		d.prof = append(d.prof, profEntry{name, a, b, host})
	}
}

// ProfileStop ends profiling and returns the time per kernel name, largest first, as a table:
// the GPU's time between each pair of events, and the host's time in the call between them (where
// the host takes longer than the GPU, the GPU waits, and its column counts the wait too). Then the
// time between one kernel's end event and the next one's start: what the stream ran outside the
// kernels (copies, memsets) or waited for the host (a read-back, the host's own work between
// enqueues), summed, and the largest such gaps by the kernels around them (profileGaps).
func (d *Device) ProfileStop() string {
	d.pOn = false
	d.Sync()
	d.enter()
	defer d.leave()
	type row struct {
		name     string
		ms, host float64
		calls    int
	}
	by := map[string]*row{}
	var total, totalHost float64
	n := len(d.prof)
	gaps := make([]float64, max(0, n-1)) // gaps[i]: from entry i's end to entry i+1's start
	for i := 0; i+1 < n; i++ {
		ms, err := d.prof[i].b.Elapsed(d.prof[i+1].a)
		must(err)
		gaps[i] = float64(ms)
	}
	names := make([]string, n)
	for i, e := range d.prof {
		names[i] = e.name
	}
	for _, e := range d.prof {
		ms, err := e.a.Elapsed(e.b)
		must(err)
		r := by[e.name]
		if r == nil {
			r = &row{name: e.name}
			by[e.name] = r
		}
		r.ms += float64(ms)
		r.host += e.host.Seconds() * 1000
		r.calls++
		total += float64(ms)
		totalHost += e.host.Seconds() * 1000
		e.a.Destroy()
		e.b.Destroy()
	}
	d.prof = nil
	rows := make([]*row, 0, len(by))
	for _, r := range by {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %6s %10s %6s %10s  %s\n", "kernel", "calls", "ms", "%", "host ms", "rate")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-44s %6d %10.3f %6.1f %10.3f  %s\n", r.name, r.calls, r.ms, 100*r.ms/total, r.host, profileRate(r.name, r.calls, r.ms))
	}
	fmt.Fprintf(&b, "%-44s %6d %10.3f %6s %10.3f\n", "total (kernels back to back)", n, total, "", totalHost)
	b.WriteString(profileGaps(names, gaps, 12))
	return b.String()
}

// launch1 launches a 1-D grid of blocks of bs threads over n items, with grid-stride loops inside
// (at most 32 blocks per multiprocessor).
func (d *Device) launch1(name string, n int, args ...uint64) {
	const bs = 256
	g := (n + bs - 1) / bs
	g = max(1, min(g, d.sms*32))
	d.launch(name, [3]int{g, 1, 1}, [3]int{bs, 1, 1}, 0, args...)
}

func f32a(v float32) uint64        { return uint64(math.Float32bits(v)) }
func i32a(v int) uint64            { return uint64(uint32(int32(v))) }
func u64a(v uint64) uint64         { return v }
func dta(t *tensor.Tensor) uint64  { return uint64(t.DType()) }
func ptra(t *tensor.Tensor) uint64 { return dptr(t) }

// nilPtr is the argument for an absent optional tensor.
const nilPtr = uint64(0)
