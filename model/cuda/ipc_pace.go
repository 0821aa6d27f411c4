//go:build cuda

package cuda

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
)

// The IPC all-reduce paced by its stream (GODDP_IPC_WAIT=stream): the meetings of ipc_kernels.go
// around launches that never wait (the kernel's halves | ipcPaced). Meeting ph of launch e on rank
// r: k_ipc_arrive writes e into r's slot [ph][0][r] of every rank's flags, its own included (after
// a system fence: everything r's stream did before is visible to the peer first), then r's stream
// waits until each peer's slot [ph][0][q] of its own flags is at or past e (cuStreamWaitValue32,
// GEQ in wrapping order). The stream's front end does the waiting, so no block spins and no multiprocessor is held while a peer lags: on a GPU the
// ranks share (MPS) the kernel-paced reduce took SMs from the lagging peer's backward and, with
// four ranks, could hold every SM slot (docs/perf-gpu-ddp.md, "Under MPS"). The order of
// meetings and launches per reducer is the kernel's, so its argument that no rank misses the
// number it waits for holds unchanged; with GEQ a slot may only run ahead of a wait if its writer
// passed a later meeting, which needs this rank's own later write first.
//
// The arrivals are a kernel's, not the stream's own writes (cuStreamWriteValue32), for one reason:
// a kernel can read the abort word. Aborted, a rank arrives nowhere, so no peer ever takes its
// buffer as reduced or read; the peers time out on it and name it, as with the kernel's meetings.
//
// Aborting: a stream wait cannot poll the abort word, so Abort also releases them: it snapshots
// the flags (which peer was behind: Stalled), then every millisecond until Close (once the last
// release has run) writes a number past every launch into all of this rank's slots on the
// device's abort stream (a peer's late write cannot re-block a wait: the next release overwrites
// it); the release needs a hardware queue no waiting stream blocks (streamConnections, env.go),
// and Close gives up after ipcDrainLimit rather than hang. The kernels, seeing the abort
// word, return without touching the buffer or any flag. Its tests passed on an H100 in session
// 17's whole suite (the stopped-rank abort included), but under MPS each meeting's stream wait cost
// ~1.8 ms (~5.5 ms a bucket: docs/perf-gpu-ddp.md), so the kernel-paced meetings stay the default.

// ipcCtlWords is the pinned control block: the abort word, the stalled word, and the flags'
// snapshot Abort takes when paced (3 phases × ipcMaxRanks).
const ipcCtlWords = 2 + 3*ipcMaxRanks

// ipcSlot is the byte offset of slot [ph][0][q] in a rank's flags.
func ipcSlot(ph, q int) uint64 { return uint64(ph*ipcMaxBlocks*ipcMaxRanks+q) * 4 }

// probePacing fails when the driver refuses stream memory operations, so a reducer that cannot
// be paced by its stream fails when it is made, naming the variable. It runs on the compute
// stream before the flags are zeroed. The caller holds the thread (enter).
func (r *ipcReducer) probePacing() error {
	p := r.flags + ipcSlot(0, r.plan.Rank)
	if err := cudadrv.MemsetD32Async(p, 1, 1, r.d.stream); err != nil {
		return err
	}
	if err := cudadrv.StreamWaitValue32(r.d.stream, p, 1); err != nil {
		return fmt.Errorf("GODDP_IPC_WAIT=stream: %w", err)
	}
	return nil
}

// launchPaced enqueues launch e's meetings and kernels on s, ipcPacedOps(halves) in order. The
// caller holds the thread (enter).
func (r *ipcReducer) launchPaced(s cudadrv.Stream, e uint32, scale, div float32, halves int) error {
	ctl := uint64(uintptr(unsafe.Pointer(r.ctl)))
	for _, op := range ipcPacedOps(halves) {
		var err error
		switch op.kind {
		case ipcArrive:
			err = r.arriveAt(s, op.phase, e)
		case ipcWait:
			err = r.waitAt(s, op.phase, e)
		case ipcReduceKernel:
			err = r.kernel(s, e, scale, div, ctl, ipcReduce|ipcPaced)
		case ipcGatherKernel:
			err = r.kernel(s, e, 1, 1, ctl, ipcGather|ipcPaced)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// arriveAt enqueues this rank's arrival at meeting ph of launch e (k_ipc_arrive).
func (r *ipcReducer) arriveAt(s cudadrv.Stream, ph int, e uint32) error {
	var args [cudadrv.MaxArgs]uint64
	copy(args[:], []uint64{r.table, uint64(r.plan.Size), uint64(r.plan.Rank), uint64(ph), uint64(e), uint64(uintptr(unsafe.Pointer(r.ctl)))})
	return cudadrv.Launch(r.arrive, [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, s, &args, 6)
}

// waitAt enqueues the wait of meeting ph of launch e: each peer's slot of this rank's flags at or
// past e.
func (r *ipcReducer) waitAt(s cudadrv.Stream, ph int, e uint32) error {
	for q := range r.plan.Size {
		if q == r.plan.Rank {
			continue
		}
		if err := cudadrv.StreamWaitValue32(s, r.flags+ipcSlot(ph, q), e); err != nil {
			return err
		}
	}
	return nil
}

// abortPaced (Abort, paced) takes the flags' snapshot that names the stalled peer, then starts
// releasing this rank's waits until Close. Once only.
func (r *ipcReducer) abortPaced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.releasing != nil || r.closed {
		return
	}
	r.d.ipcPacedAborted.Store(true)
	r.stalledQ.Store(int32(r.snapshotStalled()))
	r.releasing = make(chan struct{})
	r.released.Add(1)
	go func() {
		defer r.released.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			r.releaseWaits()
			select {
			case <-r.releasing:
				return
			case <-tick.C:
			}
		}
	}()
}

// snapshotStalled copies meeting slots of every rank from the flags into the control block and
// returns the peer furthest behind (ipcStalledPeer), or -1.
func (r *ipcReducer) snapshotStalled() int {
	d, n := r.d, r.plan.Size
	d.enter()
	defer d.leave()
	var flags [3][]uint32
	for ph := range flags {
		dst := unsafe.Pointer(&r.ctl[2+ph*ipcMaxRanks])
		if err := cudadrv.DtoH(dst, r.flags+ipcSlot(ph, 0), int64(n)*4, r.abortS); err != nil {
			return -1
		}
	}
	if d.drain(r.abortS, 2*time.Second) != nil { // bounded: Abort must not hang either
		return -1
	}
	for ph := range flags {
		flags[ph] = make([]uint32, n)
		for q := range n {
			flags[ph][q] = atomic.LoadUint32(&r.ctl[2+ph*ipcMaxRanks+q])
		}
	}
	return ipcStalledPeer(flags, r.plan.Rank)
}

// releaseWaits writes a number past every launch enqueued so far into every slot of this rank's
// flags, on the abort stream: every wait of this rank's streams passes. Only once the last
// release has run: a release that cannot run (its queue blocked) is not queued again every
// millisecond until the stream's command buffer fills and the enqueue itself blocks — which
// blocked every submission of the context (session 16: 47 threads in cuMemsetD32Async).
func (r *ipcReducer) releaseWaits() {
	d := r.d
	d.enter()
	defer d.leave()
	if done, err := r.relEv.Query(); err != nil || !done {
		return
	}
	if cudadrv.MemsetD32Async(r.flags, r.epoch.Load()+1<<30, ipcFlagBytes/4, r.abortS) == nil {
		_ = r.relEv.Record(r.abortS)
	}
}

// ipcDrainLimit bounds Close's wait for a stream after Abort.
const ipcDrainLimit = 20 * time.Second

// ipcAbortStream returns the device's abort stream, made on first use. The caller holds the
// thread (enter).
func (d *Device) ipcAbortStream() (cudadrv.Stream, error) {
	d.ipcAbortMu.Lock()
	defer d.ipcAbortMu.Unlock()
	if !d.ipcAbortOK {
		s, err := cudadrv.NewStream()
		if err != nil {
			return s, err
		}
		d.ipcAbortS, d.ipcAbortOK = s, true
	}
	return d.ipcAbortS, nil
}

// drain waits until the work enqueued on s so far is done, polling an event, at most limit: an
// error then names the limit and the stream's work stays queued.
func (d *Device) drain(s cudadrv.Stream, limit time.Duration) error {
	d.enter()
	ev := d.takeEvent()
	err := ev.Record(s)
	d.leave()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		d.enter()
		done, err := ev.Query()
		d.leave()
		if err != nil {
			return err
		}
		if done {
			d.putEvent(ev)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a stream was still waiting after %s (a meeting never released)", limit)
		}
		time.Sleep(wait)
	}
}

// stopReleasing ends Abort's releases (Close, once the streams are done). The caller must not
// hold r.mu.
func (r *ipcReducer) stopReleasing() {
	r.mu.Lock()
	ch := r.releasing
	r.mu.Unlock()
	if ch != nil {
		close(ch)
		r.released.Wait()
	}
}
