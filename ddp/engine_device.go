package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// The device path (issue 34 stage 2, `ddp.intra_host: device`): inside one host every bucket is
// all-reduced on the device, over CUDA IPC buffers (tensor.IPCStreamDevice), on a side stream
// while backward goes on; no gradient leaves the device.
//
//	training goroutine, per bucket as backward completes it:
//	  Copy(wire buffer ← bucket's f32 gradients)   compute stream (a cast for f16/bf16)
//	then per bucket in index order (the same on every rank), once it and those before it are copied:
//	  Fork; Launch                                 side stream, after the copy (event)
//	  hand the bucket to its channel's comm goroutine
//	comm goroutine, per bucket:
//	  a 1-float all-reduce over the channel (the control plane): every rank has launched the
//	  bucket, or the group's error names the rank that has not (dead, stopped)
//	  poll the launch's fence, bounded by Options.DeviceGrace
//	Wait, once every bucket reported: Join (the compute stream waits for the side stream by
//	event, no host wait) and Copy each wire buffer back into the gradients (a widen for 16-bit)
//
// Faults. IPC never notices a dead peer: a kernel whose peer never arrives would wait for ever.
// Every wait in the kernel also polls an abort word in pinned host memory (model/cuda
// ipc_async.go); the engine sets it on every reducer (abort) when the control-plane all-reduce
// fails, when a launched all-reduce has not finished DeviceGrace after every rank launched it, and
// at Close. The kernel then returns, so no stream, and no host wait on one, hangs; the run fails
// with the group's error (naming the rank) or this engine's (naming the rank a kernel gave up
// waiting for).
//
// Averaging has one owner, allreduce.AvgScale: with a 16-bit wire every contribution is scaled
// by it in f32 before the addition; with f32 the sum is divided by the world size, as
// allreduce's Avg does. Several hosts: refused (UseDevice), the hierarchical composition on the
// device is not built yet.

// DefaultDeviceGrace is how long a launched device all-reduce may take once every rank has
// launched it (the control plane agreed) before the engine aborts it.
const DefaultDeviceGrace = 10 * time.Second

// devicePath is the engine's state on the device path (nil elsewhere).
type devicePath struct {
	stream tensor.IPCStream
	reds   []tensor.IPCAsyncReducer // per bucket
	bufs   []*tensor.Tensor         // per bucket, the wire's dtype, on the device
	fences []tensor.Fence           // per bucket, this step's launch (written by the training goroutine before the bucket is handed over)
	scale  float32
	div    float32
	grace  time.Duration
}

// wireDType is the device buffers' dtype for a wire: f32, f16 or bf16.
func wireDType(w allreduce.Wire) (tensor.DType, error) {
	switch w {
	case allreduce.WireF32:
		return tensor.F32, nil
	case allreduce.WireF16:
		return tensor.F16, nil
	case allreduce.WireBF16:
		return tensor.BF16, nil
	}
	return 0, fmt.Errorf("ddp.wire %s: the device all-reduce carries f32, f16 or bf16", w)
}

// deviceScale is (scale, div) of the device all-reduce's Avg on a wire: allreduce's arithmetic.
func deviceScale(dt tensor.DType, size int) (scale, div float32) {
	if dt == tensor.F32 {
		return 1, float32(size)
	}
	return allreduce.AvgScale(size), 1
}

// UseDevice switches the engine to the device path: a device reducer per bucket, their handles
// exchanged over the process group. It is a collective of the engine's group: call it on every
// rank after New and before the first step. hosts is the number of hosts in the world: more than
// one is refused. A rank that fails still takes part in every exchange, so all ranks fail.
func (e *Engine) UseDevice(ctx context.Context, hosts int) error {
	n := e.comm.Size()
	var mine error
	sd, ok := e.dev.(tensor.IPCStreamDevice)
	dt, werr := wireDType(e.opts.Wire)
	switch {
	case hosts > 1:
		mine = fmt.Errorf("ddp.intra_host: device with %d hosts: the device all-reduce between hosts is not built yet (one host only); use ddp.intra_host: host", hosts)
	case !ok:
		mine = fmt.Errorf("ddp.intra_host: device: device %s has no all-reduce over IPC buffers on a side stream (a CUDA build has)", e.dev.Name())
	case werr != nil:
		mine = werr
	case e.shard != nil:
		mine = errors.New("ddp.intra_host: device with ddp.shard_optimizer: not built yet; use one or the other")
	case len(e.buckets) == 0 || n < 2:
		return nil // nothing to reduce
	}
	if mine != nil {
		// The others are making reducers: fail their handle exchanges too.
		for range e.buckets {
			if _, err := e.comm.AllGather(ctx, []byte{0}); err != nil {
				break
			}
		}
		return mine
	}
	p := &devicePath{fences: make([]tensor.Fence, len(e.buckets)), grace: e.opts.DeviceGrace}
	if p.grace <= 0 {
		p.grace = DefaultDeviceGrace
	}
	p.scale, p.div = deviceScale(dt, n)
	var err error
	p.stream, err = sd.NewIPCStream()
	for _, b := range e.buckets {
		var red tensor.IPCReducer
		buf := e.dev.Alloc(dt, "ddp.device_bucket", b.hi-b.lo)
		p.bufs = append(p.bufs, buf)
		if err != nil { // keep the exchanges matched: NewDeviceReducer with a device that fails
			red, err = NewDeviceReducer(ctx, failingIPC{e.dev, err}, buf, e.comm)
		} else {
			red, err = NewDeviceReducer(ctx, e.dev, buf, e.comm)
		}
		if err != nil {
			continue
		}
		ar, ok := red.(tensor.IPCAsyncReducer)
		if !ok {
			red.Close()
			err = fmt.Errorf("ddp.intra_host: device: device %s's reducer cannot run on a side stream", e.dev.Name())
			continue
		}
		p.reds = append(p.reds, ar)
	}
	if err != nil {
		p.close(true)
		for _, t := range p.bufs {
			e.dev.Free(t)
		}
		return err
	}
	e.devp = p
	if e.gpu != nil { // the staged path's pinned buffers are not used
		e.gpu.stg.Close()
		e.gpu = nil
	}
	for _, b := range e.buckets {
		b.host = nil
	}
	e.log.Info("ddp: gradients are all-reduced on the device over CUDA IPC inside the host (ddp.intra_host: device)",
		"buckets", len(e.buckets), "wire", e.opts.Wire.String(), "ranks", n, "grace", p.grace)
	return nil
}

// failingIPC is a device whose NewIPCReducer fails with err: a rank that could not make its side
// stream still takes part in the handle exchange, so every rank fails naming it.
type failingIPC struct {
	tensor.Device
	err error
}

func (f failingIPC) NewIPCReducer(*tensor.Tensor, tensor.IPCPlan) (tensor.IPCReducer, error) {
	return nil, f.err
}

// Device reports whether the engine all-reduces on the device (UseDevice).
func (e *Engine) Device() bool { return e.devp != nil }

// abort makes every reducer's kernels give up their waits.
func (p *devicePath) abort() {
	for _, r := range p.reds {
		r.Abort()
	}
}

// stalled is the first rank a reducer's kernel gave up waiting for, or -1.
func (p *devicePath) stalled() int {
	for _, r := range p.reds {
		if q := r.Stalled(); q >= 0 {
			return q
		}
	}
	return -1
}

// close releases the side stream and the reducers; abort first when an all-reduce may still wait
// for a peer.
func (p *devicePath) close(abort bool) {
	if abort {
		p.abort()
	}
	if p.stream != nil {
		p.stream.Close()
	}
	for _, r := range p.reds {
		r.Close()
	}
	p.reds, p.stream = nil, nil
}

// launchDevice enqueues bucket b's all-reduce on the side stream, after the compute stream's
// work so far (its copy into the wire buffer among it). The training goroutine calls it in index
// order, whatever order backward completes the buckets in, so every rank's side stream runs the
// same kernels in the same order: one whose readiness order differed could not meet its peers.
func (e *Engine) launchDevice(b *bucket) {
	p := e.devp
	p.stream.Fork()
	p.fences[b.index] = p.reds[b.index].Launch(p.stream, p.scale, p.div)
}

// reduceDevice is channel ch's comm goroutine's work for bucket b on the device path: agree over
// the control plane that every rank launched it, then wait for its fence, bounded.
func (e *Engine) reduceDevice(comm Comm, b *bucket) error {
	p := e.devp
	b.start = e.now()
	defer func() { b.end = e.now() }()
	name := fmt.Sprintf("ddp: device all-reduce of gradient bucket %d (%s)", b.index, b.params[0].Name)
	if err := comm.AllReduce(e.ctx, []float32{0}, allreduce.Sum, allreduce.WireF32); err != nil {
		p.abort()
		return fmt.Errorf("%s: %w", name, err)
	}
	return waitFence(e.ctx, p.fences[b.index], p.grace, p.abort, p.stalled, name)
}

// waitFence polls f until it passes. When ctx ends or grace runs out first it calls abort (the
// kernels give up), waits up to grace more for f, and returns an error naming the rank a kernel
// gave up on (stalled), if any. It never waits unbounded.
func waitFence(ctx context.Context, f tensor.Fence, grace time.Duration, abort func(), stalled func() int, name string) error {
	deadline := time.Now().Add(grace)
	poll := 20 * time.Microsecond
	var why error
	for !f.Done() {
		if err := ctx.Err(); err != nil {
			why = err
			break
		}
		if time.Now().After(deadline) {
			why = fmt.Errorf("not finished %s after every rank launched it", grace)
			break
		}
		time.Sleep(poll)
		poll = min(2*poll, time.Millisecond)
	}
	if why == nil {
		if q := stalled(); q >= 0 { // another bucket's failure aborted this one
			return fmt.Errorf("%s: aborted while waiting for rank %d", name, q)
		}
		return nil
	}
	abort()
	end := time.Now().Add(grace)
	for !f.Done() && time.Now().Before(end) {
		time.Sleep(time.Millisecond)
	}
	if q := stalled(); q >= 0 {
		return fmt.Errorf("%s: %w; rank %d never arrived (aborted)", name, why, q)
	}
	return fmt.Errorf("%s: %w (aborted)", name, why)
}

// finishDevice orders the compute stream after every all-reduce and copies the results back into
// the gradients (Wait, training goroutine, after every bucket reported success).
func (e *Engine) finishDevice() {
	p := e.devp
	p.stream.Join()
	for _, b := range e.buckets {
		e.dev.Copy(b.view, p.bufs[b.index])
		p.fences[b.index] = nil
	}
}

// closeDevice aborts whatever may still wait and frees the device path (Close).
func (e *Engine) closeDevice() {
	p := e.devp
	p.close(true)
	for _, t := range p.bufs {
		e.dev.Free(t)
	}
}
