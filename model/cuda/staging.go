//go:build cuda

package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's GradStager (tensor.GradStager says what each step does). Streams:
//
//	compute  cast kernel per bucket (grad f32 range · scale → f16 device buffer), event A
//	d2h      waits A, copies the f16 buffer to pinned host memory, event B (Host waits B)
//	ret      pinned → f16 device buffer, widen kernel f16 → grad range (Return)
//	compute  at Finish: waits an event recorded on ret after the last Return
//
// Both side streams are the plan's own, so Device.Sync (which the trainer calls at the end of
// backward) waits neither for the staging copies nor for communication.

var _ tensor.WireStager = (*Device)(nil)

// pinnedBytes counts the staging plans' pinned memory per device (the Device struct has no field
// for it; this file owns the ability).
var pinnedBytes sync.Map // *Device → *atomic.Int64

func (d *Device) pinnedCounter() *atomic.Int64 {
	v, _ := pinnedBytes.LoadOrStore(d, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// PinnedBytes is the page-locked host memory held by this device's staging plans.
func (d *Device) PinnedBytes() int64 { return d.pinnedCounter().Load() }

type cudaStaging struct {
	d      *Device
	grad   *tensor.Tensor
	ranges [][2]int
	off    []int // element offset of each range in the packed f16 buffers
	total  int

	half   *tensor.Tensor // packed f16 device buffer (all ranges)
	pinned *Pinned        // packed f16 host buffer

	d2h, ret      cudadrv.Stream
	evCast, evD2H []cudadrv.Event
	evRet         cudadrv.Event
	mod           cudadrv.Module
	fCast, fWiden cudadrv.Function

	peer *stagingPeer // NewPeerReduce's (staging_peer.go); nil until then and after its Close

	closed bool
}

// NewGradStaging allocates the packed f16 device buffer and the pinned host buffer for ranges,
// the two streams and the events, and loads the cast and widen kernels.
func (d *Device) NewGradStaging(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
	return d.NewGradStagingWire(grad, ranges, tensor.F16)
}

// NewGradStagingWire is NewGradStaging in wire's 16-bit format: F16, or BF16 (the staging
// kernels' bf16 instantiation, bf16.go; compute capability 8.0 and later).
func (d *Device) NewGradStagingWire(grad *tensor.Tensor, ranges [][2]int, wire tensor.DType) (tensor.GradStaging, error) {
	if !wire.Half() || (wire == tensor.BF16 && d.major < 8) {
		return nil, fmt.Errorf("cuda: gradient staging in %s on sm_%d%d: want f16, or bf16 on compute capability 8.0 and later", wire, d.major, d.minor)
	}
	if grad.DType() != tensor.F32 {
		return nil, fmt.Errorf("cuda: gradient staging of %s: want f32", grad)
	}
	s := &cudaStaging{d: d, grad: grad, ranges: append([][2]int(nil), ranges...), off: make([]int, len(ranges))}
	for i, r := range ranges {
		if r[0] < 0 || r[1] > grad.Len() || r[0] >= r[1] {
			return nil, fmt.Errorf("cuda: gradient staging range %d [%d,%d) outside %s", i, r[0], r[1], grad)
		}
		s.off[i] = s.total
		// Keep every bucket's start 16-byte aligned in the packed buffers (vector path).
		s.total += (r[1] - r[0] + 7) &^ 7
	}
	src, err := instantiate(stagingKernelSource, wire, bf16Swaps)
	if err != nil {
		return nil, err
	}
	ptx, err := compileCached(src, []string{fmt.Sprintf("--gpu-architecture=compute_%d%d", d.major, d.minor), "-default-device", "--std=c++17"})
	if err != nil {
		return nil, err
	}
	pin, err := d.HostAlloc(int64(s.total) * 2)
	if err != nil {
		return nil, err
	}
	s.pinned = pin
	d.pinnedCounter().Add(pin.Bytes())
	tag := "ddp.staging.f16"
	if wire == tensor.BF16 {
		tag = "ddp.staging.bf16"
	}
	s.half = d.Alloc(wire, tag, s.total)

	d.enter()
	defer d.leave()
	fail := func(e error) (tensor.GradStaging, error) {
		d.leave()
		s.Close()
		d.enter()
		return nil, fmt.Errorf("cuda: gradient staging: %w", e)
	}
	if s.mod, err = cudadrv.LoadPTX(ptx); err != nil {
		return fail(err)
	}
	if s.fCast, err = s.mod.Function("k_stage_cast"); err != nil {
		return fail(err)
	}
	if s.fWiden, err = s.mod.Function("k_stage_widen"); err != nil {
		return fail(err)
	}
	if s.d2h, err = cudadrv.NewStream(); err != nil {
		return fail(err)
	}
	if s.ret, err = cudadrv.NewStream(); err != nil {
		return fail(err)
	}
	for range ranges {
		a, err := cudadrv.NewEvent(false)
		if err != nil {
			return fail(err)
		}
		s.evCast = append(s.evCast, a)
		b, err := cudadrv.NewEvent(false)
		if err != nil {
			return fail(err)
		}
		s.evD2H = append(s.evD2H, b)
	}
	if s.evRet, err = cudadrv.NewEvent(false); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *cudaStaging) PinnedBytes() int64 {
	if s.pinned == nil {
		return 0
	}
	return s.pinned.Bytes()
}

func (s *cudaStaging) DeviceBytes() int64 {
	if s.half == nil {
		return 0
	}
	return s.half.Bytes()
}

// launch1 enqueues a 1-D grid-stride kernel over n elements on stream st. The caller holds the
// thread (enter).
func (s *cudaStaging) launch1(f cudadrv.Function, st cudadrv.Stream, n int, args ...uint64) {
	const bs = 256
	g := max(1, min((n/4+bs-1)/bs, s.d.sms*8))
	var vals [cudadrv.MaxArgs]uint64
	copy(vals[:], args)
	must(cudadrv.Launch(f, [3]int{g, 1, 1}, [3]int{bs, 1, 1}, 0, st, &vals, len(args)))
}

func (s *cudaStaging) halfPtr(i int) uint64 { return dptr(s.half) + uint64(s.off[i])*2 }
func (s *cudaStaging) gradPtr(i int) uint64 { return dptr(s.grad) + uint64(s.ranges[i][0])*4 }
func (s *cudaStaging) count(i int) int      { return s.ranges[i][1] - s.ranges[i][0] }

// Stage: cast on the compute stream, then the copy to pinned memory on the d2h stream after it.
func (s *cudaStaging) Stage(i int, scale float32) {
	n := s.count(i)
	d := s.d
	d.enter()
	defer d.leave()
	s.launch1(s.fCast, d.stream, n, s.halfPtr(i), s.gradPtr(i), uint64(n), f32a(scale))
	must(s.evCast[i].Record(d.stream))
	must(s.d2h.Wait(s.evCast[i]))
	must(cudadrv.DtoH(unsafe.Add(s.pinned.p, s.off[i]*2), s.halfPtr(i), int64(n)*2, s.d2h))
	must(s.evD2H[i].Record(s.d2h))
}

// Host waits for bucket i's copy (its event only) and returns its pinned half values.
func (s *cudaStaging) Host(i int) []uint16 {
	s.d.enter()
	defer s.d.leave()
	must(s.evD2H[i].Sync())
	return s.pinned.U16()[s.off[i] : s.off[i]+s.count(i)]
}

// Return copies bucket i back and widens it into the slab, on the return stream.
func (s *cudaStaging) Return(i int) {
	n := s.count(i)
	s.d.enter()
	defer s.d.leave()
	must(cudadrv.HtoD(s.halfPtr(i), unsafe.Add(s.pinned.p, s.off[i]*2), int64(n)*2, s.ret))
	s.launch1(s.fWiden, s.ret, n, s.gradPtr(i), s.halfPtr(i), uint64(n))
}

// Finish makes the compute stream wait (on the device) for every Return enqueued so far.
func (s *cudaStaging) Finish() {
	d := s.d
	d.enter()
	defer d.leave()
	must(s.evRet.Record(s.ret))
	must(d.stream.Wait(s.evRet))
}

// Close waits for the plan's streams and releases everything. Safe on a partly built plan.
func (s *cudaStaging) Close() {
	if s.closed {
		return
	}
	s.closed = true
	d := s.d
	d.enter()
	var zero cudadrv.Stream
	for _, st := range []cudadrv.Stream{s.d2h, s.ret} {
		if st != zero {
			st.Sync()
		}
	}
	must(d.stream.Sync())
	for _, st := range []cudadrv.Stream{s.d2h, s.ret} {
		if st != zero {
			st.Destroy()
		}
	}
	for _, e := range append(append([]cudadrv.Event(nil), s.evCast...), s.evD2H...) {
		e.Destroy()
	}
	var zeroEv cudadrv.Event
	if s.evRet != zeroEv {
		s.evRet.Destroy()
	}
	var zeroMod cudadrv.Module
	if s.mod != zeroMod {
		s.mod.Unload()
	}
	d.leave()
	if s.half != nil {
		d.Free(s.half)
		s.half = nil
	}
	if s.pinned != nil {
		d.pinnedCounter().Add(-s.pinned.Bytes())
		s.pinned.Free()
		s.pinned = nil
	}
}
