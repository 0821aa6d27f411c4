//go:build cuda

package ddp

import "testing"

// The sharded step on the GPU's staged path (shard_gpu.go; issue 31, stage 2, passed on the H200
// on 2026-12-05 without the sharded master): ranks 2 and 4, each a goroutine with its own CUDA
// device on GPU 0 over the in-process transport, train an fp16 MLP sharded and unsharded on the
// staged path (the f16 wire); the weights (param_sha256), the f16 copy, the norms, the gathered m
// and v and the skipped step must match bit for bit, the optimizer state must be N/W on each
// device, and no host f32 copy held. The shard_master cases (ddp.shard_master: the f32 master kept
// for the shard only, model.Params.ShardMaster; not yet run on a GPU) also check that each
// device's live master is the shard's (checkMasterShard: no whole params block).
func TestCUDAShardStaged_bitIdenticalToUnsharded(t *testing.T) {
	runShardStaged(t, cudaDev)
}

// ddp.shard_gather: device on the GPU (shard_peer.go; passed on an H100, session 20): the same training
// with the f16 weights copied between the ranks' devices (goroutine ranks of one process: each
// copies straight from the others' memory on GPU 0) ends bit-identical to unsharded.
func TestCUDAShardStaged_peerGatherBitIdentical(t *testing.T) {
	runPeerGather(t, func(*mirrorHub) newDevFunc { return cudaDev })
}
