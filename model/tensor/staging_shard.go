package tensor

// ShardStaging is an optional ability of a GradStaging plan: the sharded step
// (ddp.shard_optimizer) on the staged path. Gradients are reduce-scattered in the bucket's pinned
// half buffer and only the rank's own segment comes back; the updated 16-bit weights go out
// through the same pinned buffer, are all-gathered there and come back whole. Offsets lo, hi
// are elements of range i (relative to its start). The CUDA device's plans have it
// (model/cuda/staging_shard.go).
//
//	ReturnRange(i, lo, hi)  comm goroutine, instead of Return(i): copies back and widens only
//	                        [lo, hi) of bucket i into the slab, on the return stream (Finish
//	                        orders it before later work, as for Return). The rest of the
//	                        bucket's slab range keeps what backward wrote.
//	StageWeights(i, w, lo, hi)
//	                        training goroutine, between steps: copies elements [lo, hi) of range
//	                        i of w (an f16 tensor laid out as the gradient slab: the 16-bit
//	                        compute copy) into bucket i's pinned buffer and waits for the copy;
//	                        returns the bucket's whole pinned buffer, which the caller
//	                        all-gathers (memory only, from any goroutine).
//	ReturnWeights(i, w)     training goroutine, after the gather: enqueues the copy of bucket
//	                        i's pinned buffer into range i of w on the compute stream (later
//	                        work, the next forward and the next Stage's use of the buffer, is
//	                        ordered after it).
type ShardStaging interface {
	GradStaging
	ReturnRange(i, lo, hi int)
	StageWeights(i int, w *Tensor, lo, hi int) []uint16
	ReturnWeights(i int, w *Tensor)
}

// PeerShardStaging is an optional ability of a ShardStaging plan whose device f16 buffers the
// ranks of one host can read from each other (the CUDA device's plans: CUDA IPC): the sharded
// step's reduce-scatter by device copies (ddp.shard_reduce: device), no pinned memory and no
// host ring. Offsets lo, hi are elements of range i, as for ShardStaging.
//
//	NewPeerReduce(rank, size)
//	                 once, before the first step: exports the plan's device f16 buffers. The
//	                 PeerMirror it returns is exchanged and connected as any (Handle, Connect:
//	                 the peers' plans must have the same ranges); its Pull copies [lo, hi) of
//	                 the packed buffers on the compute stream (ddp does not use it); its Close
//	                 waits for this plan's copies, then unmaps the peers' buffers.
//	StageDevice(i, s) training goroutine, instead of Stage: the cast of range i into bucket i's
//	                 device f16 buffer only, in compute-stream order; no copy to pinned memory.
//	WaitStaged(i)    comm goroutine: waits for that cast (its own event, not the device).
//	ReduceRange(i, lo, hi, order)
//	                 comm goroutine, instead of Host and ReturnRange: on the return stream,
//	                 copies [lo, hi) of bucket i out of every other rank's buffer into device
//	                 scratch, then one kernel sums, per element, the ranks' values in order
//	                 (each rank once): the first as it is, each next added in f32 and the partial
//	                 sum rounded to f16 (allreduce.SumF16), writes the sum into [lo, hi) of this
//	                 rank's buffer and widens it into the slab (Finish orders it, as for
//	                 ReturnRange). The caller makes sure every rank's cast of bucket i is done
//	                 before (each waited, then the ranks met) and that no rank casts bucket i
//	                 again before these copies are done. Several goroutines (the engine's
//	                 channels) may call it at once, each for its own bucket: the plan enqueues
//	                 one call's copies and sum at a time (they share its scratch).
type PeerShardStaging interface {
	ShardStaging
	NewPeerReduce(rank, size int) (PeerMirror, error)
	StageDevice(i int, scale float32)
	WaitStaged(i int)
	ReduceRange(i, lo, hi int, order []int)
}

// PeerGradStaging is an optional ability of a PeerShardStaging plan: the unsharded all-reduce by
// device copies (ddp.intra_host: copies) — ReduceRange for this rank's own segment of a bucket
// (allreduce.Segment, as the host ring's reduce-scatter would leave it), then every other rank's
// summed segment copied out of its buffer. Offsets are elements of range i, as for ShardStaging;
// segs[q] is rank q's segment [lo, hi) of range i.
//
//	WaitReduced(i)   comm goroutine, after ReduceRange(i, …): waits (the host, for an event the
//	                 sum recorded, not the device) for this plan's copies out of its peers'
//	                 buffers and the sum into its own segment.
//	GatherRanges(i, segs)
//	                 comm goroutine, after WaitReduced: on the return stream, copies each other
//	                 rank q's segment segs[q] of bucket i out of q's buffer into the same offsets
//	                 of this rank's buffer (this rank's own entry is skipped: ReduceRange wrote
//	                 it), then widens the whole bucket into the slab (Finish orders it, as for
//	                 Return). The caller makes sure every rank's sum is done before (each
//	                 WaitReduced, then the ranks met) and that no rank casts bucket i again
//	                 before these copies are done.
//	ReleaseHost()    once, after the peers are connected: the all-reduce goes by copies from
//	                 now on, so the plan frees its pinned host buffer (PinnedBytes then 0); Stage,
//	                 Host, Return and the weights' pinned methods must not be called after it.
type PeerGradStaging interface {
	PeerShardStaging
	WaitReduced(i int)
	GatherRanges(i int, segs [][2]int)
	ReleaseHost()
}
