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
