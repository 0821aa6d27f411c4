//go:build cuda

package ddp

import "testing"

// ddp.shard_reduce: device on the GPU (shard_peer_reduce.go; failed on an H100 in session 21: the
// scratch race; fixed, it passed three times running in session 22): the same training with the f16 gradients reduce-scattered by copies between the ranks' staging buffers
// (goroutine ranks of one process: each copies straight from the others' memory on GPU 0) and
// summed by k_stage_ring_sum ends bit-identical to unsharded — the kernel's f32 additions and f16
// roundings are the host ring's (allreduce.SumF16).
func TestCUDAShardStaged_peerReduceBitIdentical(t *testing.T) {
	runPeerReduce(t, func(*stagingHub) newDevFunc { return cudaDev })
}
