package ddp

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

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
// allreduce's Avg does.
//
// Several hosts (the engine's groups are allreduce.Hierarchy's, which the worker opens): the
// device path inside each host composed with the host ring between hosts, as ddp.hierarchical
// composes three host rings, each bucket split into the host's local ranks' shares
// (allreduce.Segment among the local ranks, the Hierarchy's own shares):
//
//	training goroutine, per bucket in index order:
//	  Fork; ReduceScatter                           side stream: the reduce half among the host's
//	                                                ranks, then this rank's share copied to its
//	                                                pinned buffer (tensor.IPCHalfReducer)
//	comm goroutine, per bucket:
//	  the 1-float all-reduce over the host's ring (Hierarchy.Inside: the control plane)
//	  poll the reduce half's fence, bounded
//	  all-reduce the pinned share with this local rank's peers on the other hosts
//	  (Hierarchy.Between: f16 or bf16 on the wire, or f32), in place
//	Wait, once every bucket reported: per bucket in index order, AllGather (the share copied back,
//	then the gather half); the control plane agrees every local rank launched them; the last
//	gather's fence is polled, bounded; Join and copy back as on one host
//
// The arithmetic is ddp.hierarchical's: with f32 the host's sum (in the ring's order) divided by
// the local ranks, then the ring between hosts' Avg over the hosts, the very additions of the
// host rings (the same bits, TestEngineDevice_acrossHostsLikeHierarchical); with a 16-bit wire
// every contribution scaled by AvgScale(world) on the device, rounded once, then summed between
// hosts. The gather runs after backward (the ring between hosts overlaps it; the gather on the
// device takes its bandwidth's time), and the step's end waits on the host for the last gather's
// fence: a peer that died after the control plane agreed would otherwise leave the compute stream
// behind a kernel no one aborts. The two rings break each other (allreduce.HierRing), so a rank
// lost on any host is named on every other.

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

	// control[ch] is channel ch's control plane: the channel's group on one host, the host's
	// ring (Hierarchy.Inside) across hosts.
	control []Comm
	// Across hosts only (nil on one host): per channel the ring between hosts
	// (Hierarchy.Between), per bucket the half reducer and its pinned share.
	between []betweenRing
	halves  []tensor.IPCHalfReducer
	pinned  [][]byte
	local   int // ranks per host
	hosts   int

	names  []int       // the world's rank of each of the host's ranks (a reducer's peer q)
	failed atomic.Bool // abort was called: every later bucket fails

	// ddp.shard_optimizer (one host): the buckets' reduce halves alone leave each rank its segment
	// (no pinned copies; each ends in a meeting, so a rank rewrites its buffer only once every peer
	// has read it), Wait copies back the owned segments only, and GatherParams runs the gather
	// halves over gathers: per bucket, a reducer over that bucket's range of the slab the next
	// forward reads (the 16-bit compute copy, or the f32 master under fp32).
	shard   bool
	gathers []tensor.IPCHalfReducer
}

func asAsync(rs []tensor.IPCHalfReducer) []tensor.IPCAsyncReducer {
	out := make([]tensor.IPCAsyncReducer, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// gatherReducers makes the sharded path's gather reducers (devicePath.gathers), their handles
// exchanged over comm like the buckets'. A collective of comm.
func (p *devicePath) gatherReducers(ctx context.Context, e *Engine, comm Comm) error {
	slab := e.ps.Half // what the next forward reads
	if slab == nil {
		slab = e.ps.Data
	}
	var err error
	for _, b := range e.buckets {
		var red tensor.IPCReducer
		if red, err = matchedReducer(ctx, e.dev, slab.View(b.lo, b.hi-b.lo), comm, err); err != nil {
			continue
		}
		hr, ok := red.(tensor.IPCHalfReducer)
		if !ok {
			red.Close()
			err = fmt.Errorf("ddp.intra_host: device with ddp.shard_optimizer: device %s's reducer cannot run its halves apart", e.dev.Name())
			continue
		}
		p.gathers = append(p.gathers, hr)
	}
	return err
}

// hostRings is what the device path across hosts needs of an engine's group: allreduce.Hierarchy.
type hostRings interface {
	Hosts() int
	Inside() *allreduce.HierRing
	Between() *allreduce.HierRing
}

var _ hostRings = (*allreduce.Hierarchy)(nil)

// betweenRing all-reduces a pinned share with the other hosts (allreduce.HierRing).
type betweenRing interface {
	AllReduce(ctx context.Context, buf []float32, op allreduce.Op, wire allreduce.Wire) error
	AllReduceF16(ctx context.Context, buf []uint16, op allreduce.Op) error
	AllReduceBF16(ctx context.Context, buf []uint16, op allreduce.Op) error
}

var _ betweenRing = (*allreduce.HierRing)(nil)

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
// exchanged over the process group (the host's ring across hosts). It is a collective of the
// engine's group: call it on every rank after New and before the first step. hosts is the number
// of hosts in the world: with more than one, the engine's groups must be allreduce.Hierarchy's
// (the worker opens them), and the device path inside each host is composed with the ring
// between hosts. A rank that fails still takes part in every exchange, so all ranks fail.
func (e *Engine) UseDevice(ctx context.Context, hosts int) error {
	n := e.comm.Size()
	var mine error
	sd, ok := e.dev.(tensor.IPCStreamDevice)
	dt, werr := wireDType(e.opts.Wire)
	control := e.comms // the handle exchanges and the control plane, per channel
	var between []betweenRing
	if hosts > 1 {
		control = nil
		for _, c := range e.comms {
			hr, ok := c.(hostRings)
			if !ok || hr.Hosts() != hosts {
				control = nil
				break
			}
			control = append(control, hr.Inside())
			between = append(between, hr.Between())
		}
	}
	exchange := e.comm
	if len(control) > 0 {
		exchange = control[0]
	}
	switch {
	case hosts > 1 && len(control) == 0:
		mine = fmt.Errorf("ddp.intra_host: device with %d hosts: the engine's groups are not the rings inside and between %d hosts (allreduce.Hierarchy)", hosts, hosts)
	case !ok:
		mine = fmt.Errorf("ddp.intra_host: device: device %s has no all-reduce over IPC buffers on a side stream (a CUDA build has)", e.dev.Name())
	case werr != nil:
		mine = werr
	case e.shard != nil && len(between) > 0:
		mine = errors.New("ddp.intra_host: device with ddp.shard_optimizer across hosts: not built yet (one host is); use one or the other")
	case len(e.buckets) == 0 || n < 2:
		return nil // nothing to reduce
	}
	if mine != nil {
		// The others are making reducers: fail their handle exchanges too.
		for range e.buckets {
			if _, err := exchange.AllGather(ctx, []byte{0}); err != nil {
				break
			}
		}
		return mine
	}
	p := &devicePath{fences: make([]tensor.Fence, len(e.buckets)), grace: e.opts.DeviceGrace,
		control: control, between: between, local: exchange.Size(), hosts: max(1, hosts), shard: e.shard != nil}
	host := e.comm.Rank() / p.local // ranks are numbered host by host (allreduce.Hierarchy checks it)
	for q := range p.local {
		p.names = append(p.names, host*p.local+q)
	}
	if p.grace <= 0 {
		p.grace = DefaultDeviceGrace
	}
	p.scale, p.div = deviceScale(dt, n)
	if p.between != nil {
		p.scale, p.div = acrossHostsScale(dt, n, p.local)
	}
	var err error
	p.stream, err = sd.NewIPCStream()
	for _, b := range e.buckets {
		var red tensor.IPCReducer
		buf := e.dev.Alloc(dt, "ddp.device_bucket", b.hi-b.lo)
		p.bufs = append(p.bufs, buf)
		if red, err = matchedReducer(ctx, e.dev, buf, exchange, err); err != nil {
			continue
		}
		ar, ok := red.(tensor.IPCAsyncReducer)
		if !ok {
			red.Close()
			err = fmt.Errorf("ddp.intra_host: device: device %s's reducer cannot run on a side stream", e.dev.Name())
			continue
		}
		p.reds = append(p.reds, ar)
		if p.between != nil || p.shard {
			hr, ok := ar.(tensor.IPCHalfReducer)
			if !ok {
				err = fmt.Errorf("ddp.intra_host: device (%d hosts, shard_optimizer %v): device %s's reducer cannot run its halves apart", hosts, p.shard, e.dev.Name())
				continue
			}
			p.halves = append(p.halves, hr)
			if p.between != nil {
				var pin []byte
				if pin, err = hr.PinSegment(); err != nil {
					continue
				}
				p.pinned = append(p.pinned, pin)
			}
		}
	}
	if err == nil && p.shard {
		err = p.gatherReducers(ctx, e, exchange)
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
	if p.between != nil {
		var pinned int
		for _, b := range p.pinned {
			pinned += len(b)
		}
		e.log.Info("ddp: gradients are reduced on the device over CUDA IPC inside the host and on the ring between hosts in shares (ddp.intra_host: device)",
			"buckets", len(e.buckets), "wire", e.opts.Wire.String(), "local_ranks", p.local, "hosts", p.hosts, "pinned", tensor.FormatBytes(int64(pinned)), "grace", p.grace)
		return nil
	}
	e.log.Info("ddp: gradients are all-reduced on the device over CUDA IPC inside the host (ddp.intra_host: device)",
		"buckets", len(e.buckets), "wire", e.opts.Wire.String(), "ranks", n, "grace", p.grace)
	return nil
}

// acrossHostsScale is (scale, div) of the reduce half across hosts, world ranks of local per
// host: with f32 the host's sum divided by its ranks (the ring between hosts then divides by
// the hosts, allreduce's Avg); 16-bit, every contribution scaled by AvgScale(world) (the ring
// between hosts then sums), as the staged path scales before its cast.
func acrossHostsScale(dt tensor.DType, world, local int) (scale, div float32) {
	if dt == tensor.F32 {
		return 1, float32(local)
	}
	return allreduce.AvgScale(world), 1
}

// matchedReducer is NewDeviceReducer for one of a series of buffers: once an earlier one failed
// (prev), this rank still takes part in the handle exchange, with a device that fails, so every
// rank's exchanges stay matched and every rank fails naming this one.
func matchedReducer(ctx context.Context, dev tensor.Device, buf *tensor.Tensor, comm Comm, prev error) (tensor.IPCReducer, error) {
	if prev != nil {
		return NewDeviceReducer(ctx, failingIPC{dev, prev}, buf, comm)
	}
	return NewDeviceReducer(ctx, dev, buf, comm)
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

// abort is a failure's: every reducer's kernels give up their waits, and every later bucket
// fails at once (an aborted all-reduce leaves its buffer undefined, and its fence passes as if it
// had finished: nothing after it may be trusted or sent on).
func (p *devicePath) abort() {
	p.failed.Store(true)
	p.stop()
}

// stop makes every reducer's kernels give up their waits (Close, failed or not).
func (p *devicePath) stop() {
	for _, r := range p.reds {
		r.Abort()
	}
	for _, r := range p.gathers {
		r.Abort()
	}
}

// stalled is the first rank (in the world) a reducer's kernel gave up waiting for, or -1.
func (p *devicePath) stalled() int {
	all := append(append([]tensor.IPCAsyncReducer{}, p.reds...), asAsync(p.gathers)...)
	for _, r := range all {
		if q := r.Stalled(); q >= 0 {
			if q < len(p.names) {
				return p.names[q]
			}
			return q
		}
	}
	return -1
}

// close releases the side stream and the reducers; abort first when an all-reduce may still wait
// for a peer.
func (p *devicePath) close(abort bool) {
	if abort {
		p.stop()
	}
	if p.stream != nil {
		p.stream.Close()
	}
	for _, r := range p.reds {
		r.Close()
	}
	for _, r := range p.gathers {
		r.Close()
	}
	p.reds, p.gathers, p.stream = nil, nil, nil
}

// launchDevice enqueues bucket b's all-reduce on the side stream, after the compute stream's
// work so far (its copy into the wire buffer among it). The training goroutine calls it in index
// order, whatever order backward completes the buckets in, so every rank's side stream runs the
// same kernels in the same order: one whose readiness order differed could not meet its peers.
func (e *Engine) launchDevice(b *bucket) {
	p := e.devp
	p.stream.Fork()
	if p.between != nil || p.shard { // the reduce half now; the gather half in Wait (across hosts) or GatherParams (sharded)
		p.fences[b.index] = p.halves[b.index].ReduceScatter(p.stream, p.scale, p.div)
		return
	}
	p.fences[b.index] = p.reds[b.index].Launch(p.stream, p.scale, p.div)
}

// reduceDevice is channel ch's comm goroutine's work for bucket b on the device path: agree over
// the control plane that every rank (of the host) launched it, then wait for its fence, bounded;
// across hosts, then all-reduce this rank's pinned share with the other hosts.
func (e *Engine) reduceDevice(ch int, b *bucket) error {
	p := e.devp
	b.start = e.now()
	defer func() { b.end = e.now() }()
	name := fmt.Sprintf("ddp: device all-reduce of gradient bucket %d (%s)", b.index, b.params[0].Name)
	if p.failed.Load() {
		return fmt.Errorf("%s: not run: the device path was aborted by an earlier failure", name)
	}
	if err := p.control[ch].AllReduce(e.ctx, []float32{0}, allreduce.Sum, allreduce.WireF32); err != nil {
		p.abort()
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := waitFence(e.ctx, p.fences[b.index], p.grace, p.abort, p.stalled, name); err != nil {
		return err
	}
	if p.failed.Load() { // aborted while this bucket ran: its fence passed, its values are undefined
		return fmt.Errorf("%s: aborted by another bucket's failure", name)
	}
	if p.between == nil {
		return nil
	}
	if err := p.acrossHosts(e.ctx, ch, b.index, e.opts.Wire); err != nil {
		p.abort() // this rank gathers nothing: its host's gathers must not wait for it
		return fmt.Errorf("%s: between hosts: %w", name, err)
	}
	return nil
}

// acrossHosts all-reduces bucket i's pinned share, in place, over channel ch's ring between
// hosts: the f32 ring's Avg (the hosts' count divides), or the 16-bit ring's Sum of shares
// already scaled (acrossHostsScale). The pinned bytes are the device's little-endian elements,
// read here as the host's (every platform CUDA runs on is little-endian).
func (p *devicePath) acrossHosts(ctx context.Context, ch, i int, wire allreduce.Wire) error {
	b := p.pinned[i]
	if len(b) == 0 {
		return nil // local rank i's share is empty on every host alike (the same split of the same bucket)
	}
	switch wire {
	case allreduce.WireF16:
		return p.between[ch].AllReduceF16(ctx, unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), allreduce.Sum)
	case allreduce.WireBF16:
		return p.between[ch].AllReduceBF16(ctx, unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), allreduce.Sum)
	}
	return p.between[ch].AllReduce(ctx, unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), allreduce.Avg, allreduce.WireF32)
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
// the gradients (Wait, training goroutine, after every bucket reported success). Across hosts it
// first launches the gather halves, in index order, agrees over the control plane that every rank
// of the host has, and waits (bounded) for the last one.
func (e *Engine) finishDevice(ctx context.Context) error {
	p := e.devp
	if p.between != nil && len(e.buckets) > 0 {
		for _, b := range e.buckets {
			p.fences[b.index] = p.halves[b.index].AllGather(p.stream)
		}
		name := "ddp: device all-gather of the gradient buckets inside the host"
		if err := p.control[0].AllReduce(ctx, []float32{0}, allreduce.Sum, allreduce.WireF32); err != nil {
			p.abort()
			return fmt.Errorf("%s: %w", name, err)
		}
		last := len(e.buckets) - 1
		if err := waitFence(ctx, p.fences[last], p.grace, p.abort, p.stalled, name); err != nil {
			return err
		}
	}
	p.stream.Join()
	for _, b := range e.buckets {
		if p.shard { // the owned segment only: the rest of the buffer holds this rank's own values
			lo, hi := e.ownedSeg(b)
			e.dev.Copy(b.view.View(lo, hi-lo), p.bufs[b.index].View(lo, hi-lo))
		} else {
			e.dev.Copy(b.view, p.bufs[b.index])
		}
		p.fences[b.index] = nil
	}
	return nil
}

// gatherParamsDevice is GatherParams on the sharded device path: per bucket in index order the
// gather half over the slab the next forward reads (each rank's updated segment copied from its
// owner, on the side stream after the optimizer's step), the control plane's agreement that every
// rank launched them, the last one's fence (bounded), and the compute stream ordered after them.
func (e *Engine) gatherParamsDevice(ctx context.Context) error {
	p := e.devp
	name := "ddp: device all-gather of the updated weights"
	if p.failed.Load() {
		return fmt.Errorf("%s: not run: the device path was aborted by an earlier failure", name)
	}
	if len(e.buckets) == 0 {
		return nil
	}
	p.stream.Fork()
	var last tensor.Fence
	for _, g := range p.gathers {
		last = g.AllGather(p.stream)
	}
	if err := p.control[0].AllReduce(ctx, []float32{0}, allreduce.Sum, allreduce.WireF32); err != nil {
		p.abort()
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := waitFence(ctx, last, p.grace, p.abort, p.stalled, name); err != nil {
		return err
	}
	p.stream.Join()
	if e.ps.Half != nil && !e.ps.MasterSharded() {
		e.masterStale = true // as GatherParams's host path: a sharded master has no stale copy to gather
	}
	return nil
}

// closeDevice aborts whatever may still wait and frees the device path (Close). After a failure
// the wire buffers stay allocated: a peer's kernel that passed its meeting with this rank before
// the failure may still read them, and the process is going down.
func (e *Engine) closeDevice() {
	p := e.devp
	p.close(true)
	if p.failed.Load() {
		return
	}
	for _, t := range p.bufs {
		e.dev.Free(t)
	}
}
