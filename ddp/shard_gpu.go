package ddp

// shard_gpu.go: ddp.shard_optimizer on the staged path (engine_gpu.go; issue 31, stage 2 of the
// issue; run on the H200 on 2026-12-05: identical replicas, the step 1.9–4.0x the unsharded one,
// docs/perf-memory.md). When the device's staging plan has
// tensor.ShardStaging, the process group the F16 halves (f16ShardReducer) and the compute copy is
// f16 (precision fp16 with the f16 wire), the sharded step keeps the staged path:
//
//  1. A complete bucket is cast to f16 and copied to pinned memory as unsharded (Stage). The
//     comm goroutine reduce-scatters the pinned halves (ReduceScatterF16, Sum on values already
//     scaled by AvgScale: the same ring and additions as AllReduceF16, so the owned segment holds
//     the bits the unsharded staged path would widen) and returns only the owned segment
//     (ReturnRange): copied back and widened into the gradient slab's owned range on the return
//     stream. The rest of the slab range keeps this rank's local gradient, read by nothing.
//  2. The scaler's check, clipping and the optimizer's step run on the shard, on the device (the
//     optimizer's state, N/W elements, lives there).
//  3. GatherParams: the f32 master weights forward reads first (gatherMasterRead, shard.go);
//     then the training goroutine copies each bucket's owned segment of the f16 compute copy into
//     its pinned buffer (StageWeights), the channels all-gather the pinned halves
//     (AllGatherSegmentsF16: exact), and the whole buckets go back to the device on the compute
//     stream (ReturnWeights) before the next forward — with ddp.overlap_gather as forward
//     reaches each bucket (gather_overlap.go).
//
// What stays whole on the device: the gradient slab backward writes into, the f16 copy, and the
// staging plan's f16 buffers (DeviceBytes) and pinned memory; the f32 master too unless
// ddp.shard_master is on. What is sharded: the optimizer state, and the averaged gradient (only
// the owned segments are widened). The f32 master's other segments are gathered, through
// transient host f32 buffers, only where it is read whole (the replica check, checkpoints:
// GatherMaster). With ddp.shard_master: on (model.Params.ShardMaster; opt-in on cuda, not yet run
// on a GPU) the device holds the f32 master of the shard and of the norms' gains and biases only:
// the optimizer steps it through Params.MasterView, gatherMasterRead reads and writes it there,
// and MasterHost gathers the whole into a host buffer for the replica check and checkpoints; the
// staged path itself moves only the f16 copy and is unchanged.

import (
	"context"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// f16ShardReducer is what the sharded staged path needs of a process group; *allreduce.Group
// has it.
type f16ShardReducer interface {
	ReduceScatterF16(ctx context.Context, buf []uint16, op allreduce.Op) error
	AllGatherSegmentsF16(ctx context.Context, buf []uint16) error
}

var _ f16ShardReducer = (*allreduce.Group)(nil)

// shardStaging returns the staging plan's ShardStaging and the channels' reducers when the
// sharded step can take the staged path; ok false: the host path (stage 1's, through the
// buckets' host copies).
func (e *Engine) shardStaging(stg tensor.GradStaging) (ss tensor.ShardStaging, red []f16ShardReducer, ok bool) {
	if e.ps.Half == nil || e.ps.Half.DType() != tensor.F16 || e.opts.Wire != allreduce.WireF16 {
		return nil, nil, false // bf16 (compute or wire) sharded: the host path for now
	}
	if ss, ok = stg.(tensor.ShardStaging); !ok {
		return nil, nil, false
	}
	for _, c := range e.comms {
		r, ok := c.(f16ShardReducer)
		if !ok {
			return nil, nil, false
		}
		red = append(red, r)
	}
	return ss, red, true
}

// reduceStagedShard is reduceStaged's sharded half: reduce-scatter the pinned halves, return
// the owned segment only.
func (e *Engine) reduceStagedShard(ch int, b *bucket, buf []uint16) error {
	g := e.gpu
	if err := g.shardRed[ch].ReduceScatterF16(e.ctx, buf, allreduce.Sum); err != nil {
		return err
	}
	lo, hi := e.ownedSeg(b)
	g.shardStg.ReturnRange(b.index, lo, hi)
	return nil
}

// stagedHalfGather is GatherParams' all-gather on the sharded staged path: the f16 compute
// copy's owned segments are copied out to the pinned buffers here (StageWeights waits for each),
// the channels all-gather the pinned halves, and each bucket lands whole on the compute stream
// (ReturnWeights), before the layers that read it.
func (e *Engine) stagedHalfGather() gatherOp {
	g := e.gpu
	bufs := make([][]uint16, len(e.buckets))
	for _, b := range e.buckets {
		lo, hi := e.ownedSeg(b)
		bufs[b.index] = g.shardStg.StageWeights(b.index, e.ps.Half, lo, hi)
	}
	return gatherOp{
		gather: func(ctx context.Context, ch int, b *bucket) error {
			return g.shardRed[ch].AllGatherSegmentsF16(ctx, bufs[b.index])
		},
		land: func(b *bucket) { g.shardStg.ReturnWeights(b.index, e.ps.Half) },
	}
}
