//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's IPCDevice (tensor.IPCDevice says what each call does): an all-reduce over
// the buffers of every rank of a host, each rank's mapped into the others by CUDA IPC
// (cuIpcGetMemHandle / cuIpcOpenMemHandle), one kernel per all-reduce (ipc_kernels.go) paced by
// flags in device memory, or by the stream around launches that never wait (GODDP_IPC_WAIT=stream,
// ipc_pace.go; its tests passed on an H100 in session 17, and it measured slower: off). Ranks that are goroutines of one process (the tests) use each other's
// addresses directly: a process cannot open its own handles. Ranks on different GPUs of the host
// need peer access (cuDeviceCanAccessPeer; cuCtxEnablePeerAccess within a process, lazily through
// cuIpcOpenMemHandle across processes). Run on one GPU only (the ranks sharing it); ranks on
// different GPUs are not yet run.

var _ tensor.IPCDevice = (*Device)(nil)

const (
	ipcMaxBlocks = 64                                 // IPC_MAXB in ipcKernelSource: the most blocks per rank
	ipcMaxRanks  = 16                                 // IPC_MAXR: the most ranks
	ipcFlagBytes = 3 * ipcMaxBlocks * ipcMaxRanks * 4 // flags[phase][block][rank] uint32
	ipcThreads   = 512                                // threads per block
	ipcVersion   = 2                                  // of the handle's layout
)

// ipcHandle is what one rank tells the others (Handle, Connect).
type ipcHandle struct {
	pid              uint64
	ordinal          uint32
	dtype            uint32 // 0 f32, 1 f16, 2 bf16
	count            uint64
	grid             uint32
	paced            uint32               // 1: the meetings are the stream's (GODDP_IPC_WAIT=stream)
	data, flags      cudadrv.IpcMemHandle // of buf's allocation and of the flags'
	dataOff          uint64               // buf's offset in its allocation
	dataPtr, flagPtr uint64               // the addresses in the exporting process
}

const ipcHandleBytes = 4 + 8 + 4 + 4 + 8 + 4 + 4 + 2*cudadrv.IPCHandleSize + 8 + 8 + 8

func (h *ipcHandle) encode() []byte {
	b := make([]byte, 0, ipcHandleBytes)
	b = binary.LittleEndian.AppendUint32(b, ipcVersion)
	b = binary.LittleEndian.AppendUint64(b, h.pid)
	b = binary.LittleEndian.AppendUint32(b, h.ordinal)
	b = binary.LittleEndian.AppendUint32(b, h.dtype)
	b = binary.LittleEndian.AppendUint64(b, h.count)
	b = binary.LittleEndian.AppendUint32(b, h.grid)
	b = binary.LittleEndian.AppendUint32(b, h.paced)
	b = append(b, h.data[:]...)
	b = append(b, h.flags[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.dataOff)
	b = binary.LittleEndian.AppendUint64(b, h.dataPtr)
	return binary.LittleEndian.AppendUint64(b, h.flagPtr)
}

func decodeIPCHandle(b []byte) (ipcHandle, error) {
	var h ipcHandle
	if len(b) != ipcHandleBytes {
		return h, fmt.Errorf("%d bytes, want %d", len(b), ipcHandleBytes)
	}
	if v := binary.LittleEndian.Uint32(b); v != ipcVersion {
		return h, fmt.Errorf("handle version %d, this build reads %d", v, ipcVersion)
	}
	b = b[4:]
	h.pid, b = binary.LittleEndian.Uint64(b), b[8:]
	h.ordinal, b = binary.LittleEndian.Uint32(b), b[4:]
	h.dtype, b = binary.LittleEndian.Uint32(b), b[4:]
	h.count, b = binary.LittleEndian.Uint64(b), b[8:]
	h.grid, b = binary.LittleEndian.Uint32(b), b[4:]
	h.paced, b = binary.LittleEndian.Uint32(b), b[4:]
	copy(h.data[:], b)
	copy(h.flags[:], b[cudadrv.IPCHandleSize:])
	b = b[2*cudadrv.IPCHandleSize:]
	h.dataOff, b = binary.LittleEndian.Uint64(b), b[8:]
	h.dataPtr, b = binary.LittleEndian.Uint64(b), b[8:]
	h.flagPtr = binary.LittleEndian.Uint64(b)
	return h, nil
}

type ipcReducer struct {
	d    *Device
	buf  *tensor.Tensor
	plan tensor.IPCPlan
	dt   int
	me   ipcHandle

	flags, table uint64               // this rank's flags and the kernel's table (cuMemAlloc, not the pool)
	ctl          *[ipcCtlWords]uint32 // pinned host memory: abort word, stalled word (ipc_async.go), the flags' snapshot (ipc_pace.go)
	opened       []uint64             // peers' allocations mapped by IpcOpenMemHandle, closed by Close
	mod          cudadrv.Module
	loaded       bool // mod
	fn           cudadrv.Function
	grid         int
	epoch        atomic.Uint32 // the last launch's number (read by Abort's releases)

	// Paced by the stream (ipc_pace.go).
	paced     bool
	arrive    cudadrv.Function // k_ipc_arrive
	abortS    cudadrv.Stream   // Abort's snapshot and releases: the device's ipcAbortS
	relEv     cudadrv.Event    // recorded after each release: the next one waits for it
	hasRelEv  bool
	mu        sync.Mutex    // releasing, closed
	releasing chan struct{} // closed by Close: Abort's releases stop
	released  sync.WaitGroup
	stalledQ  atomic.Int32   // the peer Abort found behind, or -1
	pinned    unsafe.Pointer // this rank's segment in page-locked host memory (PinSegment), or nil
	pinnedLen int64          // its bytes
	connected bool
	closed    bool
}

// NewIPCReducer checks the plan, allocates and zeroes this rank's flags, loads the kernel and
// exports buf's and the flags' allocations. buf must stay allocated until Close.
func (d *Device) NewIPCReducer(buf *tensor.Tensor, plan tensor.IPCPlan) (tensor.IPCReducer, error) {
	dt := -1
	switch buf.DType() {
	case tensor.F32:
		dt = 0
	case tensor.F16:
		dt = 1
	case tensor.BF16:
		dt = 2
	}
	if dt < 0 {
		return nil, fmt.Errorf("cuda: IPC all-reduce of %s: want f32, f16 or bf16", buf)
	}
	if err := plan.Check(buf.Len()); err != nil {
		return nil, err
	}
	paced, err := ipcWaitStream()
	if err != nil {
		return nil, err
	}
	if plan.Size > ipcMaxRanks {
		return nil, fmt.Errorf("cuda: IPC all-reduce among %d ranks: at most %d", plan.Size, ipcMaxRanks)
	}
	if dt == 2 {
		// The bf16 kernels (the casts into and out of this buffer) load now, not at their first
		// launch: loading a module waits for the context's running kernels, and ranks that share a
		// context (goroutine ranks on one GPU) would wait there on a peer's all-reduce spinning for
		// this rank (ddp/main_cuda_test.go).
		if _, err := d.bf16Fns(); err != nil {
			return nil, err
		}
	}
	ptx, err := compileCached(ipcKernelSource, []string{fmt.Sprintf("--gpu-architecture=compute_%d%d", d.major, d.minor), "-default-device", "--std=c++17"})
	if err != nil {
		return nil, err
	}
	r := &ipcReducer{d: d, buf: buf, plan: plan, dt: dt, paced: paced,
		grid: max(1, min(ipcMaxBlocks, d.sms/plan.Size))} // every rank's blocks resident at once
	if paced {
		r.grid = max(1, d.sms) // no block waits: the grid need not fit beside the peers'
	}
	r.stalledQ.Store(-1)
	d.enter()
	defer d.leave()
	fail := func(e error) (tensor.IPCReducer, error) {
		r.release()
		return nil, fmt.Errorf("cuda: IPC all-reduce: %w", e)
	}
	if r.mod, err = cudadrv.LoadPTX(ptx); err != nil {
		return fail(err)
	}
	r.loaded = true
	if r.fn, err = r.mod.Function("k_ipc_allreduce"); err != nil {
		return fail(err)
	}
	if r.flags, err = cudadrv.MemAlloc(ipcFlagBytes); err != nil {
		return fail(err)
	}
	if paced {
		if r.arrive, err = r.mod.Function("k_ipc_arrive"); err != nil {
			return fail(err)
		}
		if r.abortS, err = d.ipcAbortStream(); err != nil {
			return fail(err)
		}
		if r.relEv, err = cudadrv.NewEvent(false); err != nil {
			return fail(err)
		}
		r.hasRelEv = true
		if err = r.probePacing(); err != nil {
			return fail(err)
		}
	}
	if err = cudadrv.MemsetD8Async(r.flags, 0, ipcFlagBytes, d.stream); err != nil {
		return fail(err)
	}
	if r.table, err = cudadrv.MemAlloc(int64(5*plan.Size) * 8); err != nil {
		return fail(err)
	}
	if r.ctl, err = newIPCControl(); err != nil {
		return fail(err)
	}
	cb, ok := buf.Buffer().(*cudaBuf)
	if !ok {
		return fail(fmt.Errorf("%s does not live on a CUDA device", buf))
	}
	r.me = ipcHandle{pid: uint64(os.Getpid()), ordinal: uint32(d.ordinal), dtype: uint32(dt), count: uint64(buf.Len()),
		grid: uint32(r.grid), paced: b2u(paced), dataOff: dptr(buf) - cb.ptr, dataPtr: dptr(buf), flagPtr: r.flags}
	if r.me.data, err = cudadrv.IpcGetMemHandle(cb.ptr); err != nil {
		return fail(err)
	}
	if r.me.flags, err = cudadrv.IpcGetMemHandle(r.flags); err != nil {
		return fail(err)
	}
	if err = d.stream.Sync(); err != nil { // the flags are zero before any peer can see them
		return fail(err)
	}
	return r, nil
}

func (r *ipcReducer) Handle() []byte { return r.me.encode() }

// Connect maps every peer's buffer and flags (their addresses as they are when the peer is this
// process), checks that every rank reduces the same kind of buffer, takes the smallest grid of any
// rank (the kernel needs the same grid everywhere) and writes the kernel's table.
func (r *ipcReducer) Connect(handles [][]byte) error {
	n := r.plan.Size
	if r.connected {
		return fmt.Errorf("cuda: IPC all-reduce: connected twice")
	}
	if len(handles) != n {
		return fmt.Errorf("cuda: IPC all-reduce: %d handles for %d ranks", len(handles), n)
	}
	d := r.d
	d.enter()
	defer d.leave()
	tab := make([]uint64, 5*n)
	grid := r.grid
	for q, b := range handles {
		h, err := decodeIPCHandle(b)
		if err != nil {
			return fmt.Errorf("cuda: IPC all-reduce: handle of rank %d: %w", q, err)
		}
		if h.dtype != r.me.dtype || h.count != r.me.count {
			return fmt.Errorf("cuda: IPC all-reduce: rank %d reduces %d elements of dtype %d, this rank (%d) %d of dtype %d",
				q, h.count, h.dtype, r.plan.Rank, r.me.count, r.me.dtype)
		}
		if h.paced != r.me.paced {
			return fmt.Errorf("cuda: IPC all-reduce: rank %d waits %s, this rank (%d) %s: set GODDP_IPC_WAIT alike on every rank",
				q, ipcWaitName(h.paced), r.plan.Rank, ipcWaitName(r.me.paced))
		}
		grid = min(grid, int(h.grid))
		switch {
		case q == r.plan.Rank:
			tab[q], tab[n+q] = r.me.dataPtr, r.me.flagPtr
		case h.pid == r.me.pid: // a goroutine rank of this process: its addresses are valid here
			if h.ordinal != r.me.ordinal {
				if err := r.peerAccess(int(h.ordinal)); err != nil {
					return fmt.Errorf("cuda: IPC all-reduce: rank %d on GPU %d: %w", q, h.ordinal, err)
				}
			}
			tab[q], tab[n+q] = h.dataPtr, h.flagPtr
		default:
			if h.ordinal != r.me.ordinal {
				if can, err := cudadrv.DeviceCanAccessPeer(d.ordinal, int(h.ordinal)); err != nil || !can {
					return fmt.Errorf("cuda: IPC all-reduce: GPU %d cannot address rank %d's GPU %d (peer access: %v)", d.ordinal, q, h.ordinal, err)
				}
			}
			base, err := cudadrv.IpcOpenMemHandle(h.data)
			if err != nil {
				return fmt.Errorf("cuda: IPC all-reduce: opening rank %d's buffer: %w", q, err)
			}
			r.opened = append(r.opened, base)
			fl, err := cudadrv.IpcOpenMemHandle(h.flags)
			if err != nil {
				return fmt.Errorf("cuda: IPC all-reduce: opening rank %d's flags: %w", q, err)
			}
			r.opened = append(r.opened, fl)
			tab[q], tab[n+q] = base+h.dataOff, fl
		}
	}
	for q, s := range r.plan.Segments {
		tab[2*n+q], tab[3*n+q] = uint64(s[0]), uint64(s[1])
	}
	for k, q := range r.plan.Order {
		tab[4*n+k] = uint64(q)
	}
	if err := cudadrv.HtoD(r.table, unsafe.Pointer(&tab[0]), int64(len(tab))*8, d.stream); err != nil {
		return err
	}
	if err := d.stream.Sync(); err != nil {
		return err
	}
	r.grid, r.connected = grid, true
	return nil
}

func b2u(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

func ipcWaitName(paced uint32) string {
	if paced != 0 {
		return "by its stream (GODDP_IPC_WAIT=stream)"
	}
	return "in the kernel (GODDP_IPC_WAIT=kernel)"
}

func (r *ipcReducer) peerAccess(peer int) error {
	can, err := cudadrv.DeviceCanAccessPeer(r.d.ordinal, peer)
	if err != nil {
		return err
	}
	if !can {
		return errors.New("no peer access between the GPUs")
	}
	return cudadrv.CtxEnablePeerAccess(peer)
}

// AllReduce enqueues the kernel on the compute stream: it returns before the GPU starts.
func (r *ipcReducer) AllReduce(avg bool) {
	if !r.connected || r.closed {
		panic("cuda: IPC all-reduce before Connect or after Close")
	}
	scale, div := float32(1), float32(1)
	if avg {
		if r.dt == 0 {
			div = float32(r.plan.Size) // the f32 ring's owner divides the full sum
		} else {
			scale = 1 / float32(r.plan.Size) // the 16-bit wire scales each contribution (allreduce.AvgScale)
		}
	}
	d := r.d
	d.enter()
	defer d.leave()
	must(r.launch(d.stream, scale, div, 0, ipcBoth))
}

// launch enqueues the all-reduce (or the halves of it that halves names; ipcBoth: the whole) on s
// as launch number e: the kernel pacing itself, or paced by the stream (ipc_pace.go). ctl is the
// abort word's address (0: the kernel's waits are unbounded). The caller holds the thread (enter).
func (r *ipcReducer) launch(s cudadrv.Stream, scale, div float32, ctl uint64, halves int) error {
	e := r.epoch.Add(1)
	if r.paced {
		return r.launchPaced(s, e, scale, div, halves)
	}
	return r.kernel(s, e, scale, div, ctl, halves)
}

// kernel enqueues one k_ipc_allreduce on s.
func (r *ipcReducer) kernel(s cudadrv.Stream, e uint32, scale, div float32, ctl uint64, halves int) error {
	var args [cudadrv.MaxArgs]uint64
	copy(args[:], []uint64{r.table, uint64(r.plan.Size), uint64(r.plan.Rank), uint64(r.dt), uint64(e), f32a(scale), f32a(div), ctl, uint64(halves)})
	return cudadrv.Launch(r.fn, [3]int{r.grid, 1, 1}, [3]int{ipcThreads, 1, 1}, 0, s, &args, 9)
}

// Close waits for the compute stream (the last all-reduce), unmaps the peers and frees the flags
// and the table. Call it after every rank's last all-reduce has finished, or after Abort (whose
// releases of a paced reducer's waits go on until here).
func (r *ipcReducer) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	aborted := r.releasing != nil
	r.mu.Unlock()
	var err error
	stuck := false // a stream still waiting after ipcDrainLimit: nothing is freed
	if aborted {
		// Paced and aborted: the releases go on while the compute stream drains, and a wait that
		// is never released (its queue blocked, CUDA_DEVICE_MAX_CONNECTIONS) fails Close after
		// ipcDrainLimit instead of hanging the process.
		err = r.d.drain(r.d.stream, ipcDrainLimit)
		stuck = err != nil
	} else {
		r.d.enter()
		err = r.d.stream.Sync()
		r.d.leave()
	}
	r.stopReleasing()
	r.d.enter()
	defer r.d.leave()
	if stuck {
		return fmt.Errorf("cuda: IPC all-reduce (rank %d) after Abort: %w; its flags, mappings and module are left to the process's exit", r.plan.Rank, err)
	}
	return errors.Join(err, r.release())
}

// release frees what the reducer holds. The caller holds the thread (enter).
func (r *ipcReducer) release() error {
	var errs []error
	if r.hasRelEv { // first: its last release may still write the flags, its snapshot ctl
		if err := r.d.drain(r.abortS, ipcDrainLimit); err != nil { // bounded, as Close's
			return fmt.Errorf("cuda: IPC all-reduce (rank %d): the abort stream: %w; its flags, mappings and module are left to the process's exit", r.plan.Rank, err)
		}
		errs = append(errs, r.relEv.Destroy())
		r.hasRelEv = false
	}
	for _, p := range r.opened {
		errs = append(errs, cudadrv.IpcCloseMemHandle(p))
	}
	r.opened = nil
	for _, p := range []*uint64{&r.flags, &r.table} {
		if *p != 0 {
			errs = append(errs, cudadrv.MemFree(*p))
			*p = 0
		}
	}
	if r.ctl != nil {
		errs = append(errs, cudadrv.HostFree(unsafe.Pointer(r.ctl)))
		r.ctl = nil
	}
	if r.pinned != nil {
		errs = append(errs, cudadrv.HostFree(r.pinned))
		r.pinned, r.pinnedLen = nil, 0
	}
	if r.loaded {
		errs = append(errs, r.mod.Unload())
		r.loaded = false
	}
	return errors.Join(errs...)
}
