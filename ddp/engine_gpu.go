package ddp

import (
	"context"
	"fmt"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// The staged path: on a device that can stage gradients (tensor.GradStager, the CUDA device) and
// with a 16-bit wire (f16, or bf16 where the device is a tensor.WireStager), a complete bucket
// never passes through a host f32 buffer. The training
// goroutine enqueues a fused cast (f32 · allreduce.AvgScale(W) → f16, on the compute stream)
// and an event-ordered copy to pinned host memory (on a copy stream), and goes straight back to
// backward. The comm goroutine waits for that one copy's event, all-reduces the pinned half
// buffer in place (AllReduceF16 with Sum: the values are already scaled as allreduce's Avg
// scales them, allreduce owning the factor; partial sums are f32, the result is half and
// bit-identical on every rank), then enqueues the copy back and the widen
// into the gradient slab on a return stream. Wait, once every bucket is back, makes the compute
// stream wait for the return stream by event: the optimizer step is the first thing on the
// compute stream that depends on communication.

// f16Reducer is what the staged path needs of the process group beyond Comm; *allreduce.Group
// has it.
type f16Reducer interface {
	AllReduceF16(ctx context.Context, buf []uint16, op allreduce.Op) error
}

var _ f16Reducer = (*allreduce.Group)(nil)

// bf16Reducer is f16Reducer for the bf16 wire.
type bf16Reducer interface {
	AllReduceBF16(ctx context.Context, buf []uint16, op allreduce.Op) error
}

var _ bf16Reducer = (*allreduce.Group)(nil)

// stagedReduce all-reduces a pinned 16-bit buffer in place (a channel's AllReduceF16 or
// AllReduceBF16).
type stagedReduce func(ctx context.Context, buf []uint16, op allreduce.Op) error

// gpuPath is the engine's state for the staged path (nil on the host path).
type gpuPath struct {
	stg   tensor.GradStaging
	red   []stagedReduce // one per channel (Engine.comms)
	scale float32
	// per bucket, this step: when the comm goroutine began waiting for the bucket's copy to
	// pinned memory (its all-reduce starts when the copy has landed: bucket.start)
	waitFrom []int64
	elems    int64 // elements staged per step (the sum of the bucket sizes)
	// ddp.shard_optimizer on the staged path (shard_gpu.go); nil unsharded
	shardStg tensor.ShardStaging
	shardRed []f16ShardReducer
}

// initStaging switches the engine to the staged path when the device, the wire and the process
// group allow it and Options.HostStaging does not forbid it.
func (e *Engine) initStaging() {
	wire := e.opts.Wire
	if e.comm.Size() < 2 || (wire != allreduce.WireF16 && wire != allreduce.WireBF16) || e.opts.HostStaging {
		return
	}
	gs, ok := e.dev.(tensor.GradStager)
	if !ok {
		return
	}
	newPlan := gs.NewGradStaging
	if wire == allreduce.WireBF16 {
		ws, ok := e.dev.(tensor.WireStager)
		if !ok {
			return
		}
		newPlan = func(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
			return ws.NewGradStagingWire(grad, ranges, tensor.BF16)
		}
	}
	var red []stagedReduce
	for _, c := range e.comms {
		if r, ok := c.(f16Reducer); ok && wire == allreduce.WireF16 {
			red = append(red, r.AllReduceF16)
		} else if r, ok := c.(bf16Reducer); ok && wire == allreduce.WireBF16 {
			red = append(red, r.AllReduceBF16)
		} else {
			return
		}
	}
	ranges := make([][2]int, len(e.buckets))
	var elems int64
	for i, b := range e.buckets {
		ranges[i] = [2]int{b.lo, b.hi}
		elems += int64(b.hi - b.lo)
	}
	stg, err := newPlan(e.ps.Grad, ranges)
	if err != nil {
		e.log.Warn("ddp: staging gradients on the device failed; using the host path", "err", err)
		return
	}
	var shardStg tensor.ShardStaging
	var shardRed []f16ShardReducer
	if e.shard != nil { // shard_gpu.go
		var ok bool
		if shardStg, shardRed, ok = e.shardStaging(stg); !ok {
			stg.Close()
			return
		}
	}
	e.gpu = &gpuPath{stg: stg, red: red, scale: allreduce.AvgScale(e.comm.Size()), waitFrom: make([]int64, len(e.buckets)), elems: elems,
		shardStg: shardStg, shardRed: shardRed}
	for _, b := range e.buckets {
		b.host = nil // the host path's f32 buffers are not used
	}
	n := e.comm.Size()
	e.stagedNote = func() { // at the first micro-step: UsePeerCopies may yet take the pinned path's place
		e.log.Info("ddp: gradients leave the device as "+wire.String()+" through pinned memory",
			"buckets", len(e.buckets), "pinned", tensor.FormatBytes(stg.PinnedBytes()), "device_f16", tensor.FormatBytes(stg.DeviceBytes()),
			"pcie_bytes_per_step", tensor.FormatBytes(4*elems), // f16 down and up
			"ring_bytes_sent_per_step", tensor.FormatBytes(2*elems*int64(2*(n-1))/int64(n)))
	}
}

// Staged reports whether the engine uses the staged (device f16 + pinned memory) path.
func (e *Engine) Staged() bool { return e.gpu != nil }

// StagingBytes returns the staged path's pinned host and device f16 bytes (0, 0 on the host path).
func (e *Engine) StagingBytes() (pinned, device int64) {
	if e.gpu == nil {
		return 0, 0
	}
	return e.gpu.stg.PinnedBytes(), e.gpu.stg.DeviceBytes()
}

// BytesPerStep says what one syncing step moves per rank: across PCIe between device and host
// (both directions together: f16 on the staged path, f32 on the host path; meaningless on the
// CPU device) and sent into the ring by this rank (2(W-1)/W of the buffer in the wire format;
// on the device path across hosts, the share's 2(H-1)/H on the ring between hosts; neither
// under UsePeerCopies, whose bytes move between the devices).
func (e *Engine) BytesPerStep() (pcie, ring int64) {
	n := int64(e.comm.Size())
	if n < 2 {
		return 0, 0
	}
	var elems int64
	for _, b := range e.buckets {
		elems += int64(b.hi - b.lo)
	}
	w := int64(e.opts.Wire.ElemBytes())
	ring = w * elems * 2 * (n - 1) / n
	if p := e.devp; p != nil && p.between != nil {
		// across hosts: this rank's share down and up, and the ring between hosts on it
		share := elems / int64(p.local)
		h := int64(p.hosts)
		return 2 * w * share, w * share * 2 * (h - 1) / h
	}
	if e.PeerCopies() {
		return 0, 0 // copies between the devices (engine_peer.go): neither PCIe nor the ring
	}
	if e.devp != nil {
		pcie = 0 // the device path (engine_device.go): nothing crosses PCIe
	} else if e.gpu != nil {
		pcie = 4 * elems
	} else {
		pcie = 8 * elems // f32 down and up
	}
	return pcie, ring
}

// reduceStaged is channel ch's comm goroutine's work for one bucket on the staged path.
func (e *Engine) reduceStaged(ch int, b *bucket) error {
	g := e.gpu
	g.waitFrom[b.index] = e.now()
	buf := g.stg.Host(b.index)
	b.start = e.now()
	if g.shardStg != nil {
		err := e.reduceStagedShard(ch, b, buf)
		b.end = e.now()
		if err != nil {
			return fmt.Errorf("ddp: reduce-scatter of gradient bucket %d (%s): %w", b.index, b.params[0].Name, err)
		}
		return nil
	}
	err := g.red[ch](e.ctx, buf, allreduce.Sum)
	b.end = e.now()
	if err != nil {
		return fmt.Errorf("ddp: all-reduce of gradient bucket %d (%s): %w", b.index, b.params[0].Name, err)
	}
	g.stg.Return(b.index)
	return nil
}

// traceStaged adds the wait for bucket b's copy to pinned memory to the trace.
func (e *Engine) traceStaged(b *bucket) {
	if e.opts.Tracer == nil || e.gpu == nil {
		return
	}
	e.opts.Tracer.Span(fmt.Sprintf("d2h wait bucket %d", b.index), "comm", e.gpu.waitFrom[b.index], b.start,
		map[string]any{"bytes": (b.hi - b.lo) * 2})
}
