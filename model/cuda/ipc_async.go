//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's IPCStreamDevice (tensor.IPCStreamDevice says what each call does): the IPC
// all-reduce (ipc.go) launched on a side stream ordered against the compute stream by events,
// and its waits made abortable. Each reducer has a block of pinned host memory (ctl), whose first
// two words are these: the host writes ctl[0] ≠ 0 to abort (a plain atomic store: no CUDA call, so no lock and no stream is
// involved, and it works while the compute stream is blocked behind the kernel); a kernel's
// waiting thread polls it every 256 spins and, once set, writes which peer it was waiting for
// into ctl[1] and its block returns (ipc_kernels.go, meet). Under unified addressing (every
// 64-bit CUDA platform) cuMemHostAlloc's pointer is the same on the device. Its tests passed on
// an H100 in session 17's whole suite.

var _ tensor.IPCStreamDevice = (*Device)(nil)
var _ tensor.IPCAsyncReducer = (*ipcReducer)(nil)

func newIPCControl() (*[ipcCtlWords]uint32, error) {
	p, err := cudadrv.HostAlloc(ipcCtlWords * 4)
	if err != nil {
		return nil, err
	}
	c := (*[ipcCtlWords]uint32)(p)
	for i := range c {
		atomic.StoreUint32(&c[i], 0)
	}
	return c, nil
}

// ipcStream is a side stream and the two events that order it against the compute stream.
type ipcStream struct {
	d          *Device
	s          cudadrv.Stream
	fork, join cudadrv.Event
}

// NewIPCStream makes a side stream for Launch.
func (d *Device) NewIPCStream() (tensor.IPCStream, error) {
	d.enter()
	defer d.leave()
	st := &ipcStream{d: d}
	var err error
	if st.s, err = cudadrv.NewStream(); err != nil {
		return nil, err
	}
	if st.fork, err = cudadrv.NewEvent(false); err != nil {
		st.s.Destroy()
		return nil, err
	}
	if st.join, err = cudadrv.NewEvent(false); err != nil {
		st.fork.Destroy()
		st.s.Destroy()
		return nil, err
	}
	return st, nil
}

// Fork makes the side stream wait for the compute stream's work so far.
func (st *ipcStream) Fork() {
	st.d.enter()
	defer st.d.leave()
	must(st.fork.Record(st.d.stream))
	must(st.s.Wait(st.fork))
}

// Join makes the compute stream wait for the side stream's work so far.
func (st *ipcStream) Join() {
	st.d.enter()
	defer st.d.leave()
	must(st.join.Record(st.s))
	must(st.d.stream.Wait(st.join))
}

// Close waits for the side stream and destroys it. Abort the reducers first if a peer may be
// gone. After a stream-paced reducer of the device was aborted, the wait is bounded (ipcDrainLimit:
// a wait never released fails Close instead of hanging it; the driver frees a stream still busy
// once its work is done).
func (st *ipcStream) Close() error {
	var err error
	if st.d.ipcPacedAborted.Load() {
		err = st.d.drain(st.s, ipcDrainLimit)
	} else {
		st.d.enter()
		err = st.s.Sync()
		st.d.leave()
	}
	st.d.enter()
	defer st.d.leave()
	return errors.Join(err, st.fork.Destroy(), st.join.Destroy(), st.s.Destroy())
}

// Launch enqueues the all-reduce on the side stream s (tensor.IPCAsyncReducer) with abortable
// waits, and returns a fence after it.
func (r *ipcReducer) Launch(s tensor.IPCStream, scale, div float32) tensor.Fence {
	st := r.sideStream(s)
	d := r.d
	d.enter()
	defer d.leave()
	must(r.launch(st.s, scale, div, uint64(uintptr(unsafe.Pointer(r.ctl))), ipcBoth))
	return r.fenceOn(st)
}

// fenceOn records an event on the side stream and returns it as a fence. The caller holds the
// thread (enter).
func (r *ipcReducer) fenceOn(st *ipcStream) tensor.Fence {
	d := r.d
	ev := d.takeEvent()
	must(ev.Record(st.s))
	f := &fence{d: d, ev: ev}
	f.cleanup = runtime.AddCleanup(f, func(ev cudadrv.Event) { d.putEvent(ev) }, ev)
	return f
}

// sideStream checks that s is a side stream of r's device and the reducer is connected.
func (r *ipcReducer) sideStream(s tensor.IPCStream) *ipcStream {
	if !r.connected || r.closed {
		panic("cuda: IPC all-reduce before Connect or after Close")
	}
	st, ok := s.(*ipcStream)
	if !ok || st.d != r.d {
		panic("cuda: IPC all-reduce launched on a stream of another device")
	}
	return st
}

var _ tensor.IPCHalfReducer = (*ipcReducer)(nil)

// segment is this rank's segment's device address and bytes.
func (r *ipcReducer) segment() (ptr uint64, bytes int64) {
	s := r.plan.Segments[r.plan.Rank]
	es := int64(r.buf.DType().Size())
	return r.me.dataPtr + uint64(int64(s[0])*es), int64(s[1]-s[0]) * es
}

// PinSegment allocates this rank's segment in page-locked host memory (tensor.IPCHalfReducer):
// the copies of ReduceScatter and AllGather run on the side stream from and into it, and the
// caller's ring between hosts reduces it in place. Its tests passed on an H100 (session 17).
func (r *ipcReducer) PinSegment() ([]byte, error) {
	_, n := r.segment()
	if r.pinned == nil {
		d := r.d
		d.enter()
		p, err := cudadrv.HostAlloc(max(n, 1))
		d.leave()
		if err != nil {
			return nil, fmt.Errorf("cuda: IPC all-reduce: pinning rank %d's segment (%s): %w", r.plan.Rank, tensor.FormatBytes(n), err)
		}
		r.pinned, r.pinnedLen = p, n
	}
	return unsafe.Slice((*byte)(r.pinned), r.pinnedLen), nil
}

// ReduceScatter enqueues the reduce half on the side stream, then the copy of this rank's
// segment into the pinned segment (tensor.IPCHalfReducer); without one (the halves used alone)
// the half ends in a meeting instead (ipcReduceEnd). Its tests passed on an H100 (session 17).
func (r *ipcReducer) ReduceScatter(s tensor.IPCStream, scale, div float32) tensor.Fence {
	st := r.sideStream(s)
	d := r.d
	d.enter()
	defer d.leave()
	halves := ipcReduce
	if r.pinned == nil {
		halves |= ipcReduceEnd
	}
	must(r.launch(st.s, scale, div, uint64(uintptr(unsafe.Pointer(r.ctl))), halves))
	if ptr, n := r.segment(); n > 0 && r.pinned != nil {
		must(cudadrv.DtoH(r.pinned, ptr, n, st.s))
	}
	return r.fenceOn(st)
}

// AllGather enqueues the copy of the pinned segment into this rank's segment (when there is one),
// then the gather half, on the side stream (tensor.IPCHalfReducer). Its tests passed on an H100
// (TestCUDA_ipcHalves and the device path's sharded rows, sessions 17 and 19).
func (r *ipcReducer) AllGather(s tensor.IPCStream) tensor.Fence {
	st := r.sideStream(s)
	d := r.d
	d.enter()
	defer d.leave()
	if ptr, n := r.segment(); n > 0 && r.pinned != nil {
		must(cudadrv.HtoD(ptr, r.pinned, n, st.s))
	}
	must(r.launch(st.s, 1, 1, uint64(uintptr(unsafe.Pointer(r.ctl))), ipcGather))
	return r.fenceOn(st)
}

// Abort sets the abort word: every wait of this rank's kernels gives up; paced by the stream, the
// stream's waits are released too (ipc_pace.go).
func (r *ipcReducer) Abort() {
	atomic.StoreUint32(&r.ctl[0], 1)
	if r.paced {
		r.abortPaced()
	}
}

// Stalled returns the rank a kernel gave up waiting for (paced by the stream: the peer furthest
// behind when Abort came), or -1.
func (r *ipcReducer) Stalled() int {
	if r.paced {
		return int(r.stalledQ.Load())
	}
	v := atomic.LoadUint32(&r.ctl[1])
	if v == 0 {
		return -1
	}
	return int((v - 1) & 0xff)
}
