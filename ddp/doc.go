// Package ddp is the data-parallel engine: it keeps N replicas of a model identical while each
// trains on its own shard, by averaging gradients across ranks after every optimizer step's last
// micro-batch.
//
// One optimizer step, as the trainer drives it (worker/loop.go; --trace hands the engine a Tracer,
// trace.go, for its all-reduce spans):
//
//  1. Engine.BeginMicro(micro, accum): micro-steps 0..k-2 are no-sync (gradients accumulate
//     locally, nothing is sent); the last one syncs.
//  2. Backward runs. Each layer reports its parameters ready (model.Param.Ready); on a syncing
//     micro-step the engine counts them into buckets of about ddp.bucket_cap_mb, built in reverse
//     registration order (the order backward finishes them). When a bucket is complete the
//     training goroutine copies its range of the gradient slab to a host staging buffer and hands
//     it to the comm goroutine, which all-reduces buckets strictly in bucket order (every rank
//     issues the same collectives in the same order) while backward goes on.
//  3. Engine.Wait: waits for every bucket, copies the averaged gradients back into the slab.
//  4. The loss scaler checks for inf/NaN; Engine.AgreeAny makes every rank take the same
//     decision, then the optimizer steps (under bf16, with no scaler, Engine.RanksWith names the
//     ranks that held one, for the error that stops the run).
//
// With ddp.shard_optimizer (Options.ShardOptimizer, ZeRO-1, shard.go) step 2 reduce-scatters
// instead: each rank keeps the averaged gradients of its ring segment of every bucket (Shard,
// PlanShard), its optimizer holds m and v for those elements only (model.NewAdamWShard) and
// updates them, ClipGradNorm takes the global norm from the shards' sums of squares, and
// GatherParams all-gathers the updated weights before the next forward (the 16-bit copy under
// mixed precision, whose f32 master GatherMaster gathers where it is read whole — or, kept for
// the shard only (ddp.shard_master, model.Params.ShardMaster), MasterHost into a host buffer;
// f32 under fp32), or with Options.OverlapGather leaves the gather in flight for the next forward to wait
// on bucket by bucket as it reads them (gather_overlap.go). The
// reduce-scatter leaves on a segment's owner the very bits the all-reduce would, so the sharded
// run ends bit-identical to the unsharded one (shard_test.go). On the CPU device (stage 2,
// tensor.HostMemory) the buckets are reduce-scattered in the gradient slab itself and no host
// copy of the gradients is held; each rank keeps only its shard's averaged gradient. On the
// staged path (fp16, a device whose staging plan has tensor.ShardStaging: CUDA) shard_gpu.go
// reduce-scatters the pinned halves and all-gathers the f16 weights there, or with UsePeerGather
// (ddp.shard_gather: device, auto's choice on one host; run on an H100) shard_peer.go copies the
// peers' updated segments straight between the devices of one host after one meeting a step.
//
// Parameters (and on resume optimizer/scaler state) are broadcast from rank 0 at the start, and
// every ddp.check_every steps CheckReplicas compares a hash of the parameters across ranks.
//
// On the host path (the CPU device, or the f32 wire) only the training goroutine touches the
// device; the comm goroutine sees host buffers only. On a device that can stage gradients
// (tensor.GradStager: the CUDA device) with the f16 wire, engine_gpu.go takes the staged path: the
// bucket is cast to f16 on the device and copied to pinned memory on a copy stream, the comm
// goroutine waits for that copy's event, all-reduces the pinned halves and enqueues the copy back
// and the widen into the slab; Wait only makes the compute stream wait for them by event. With
// `ddp.intra_host: device` (UseDevice, engine_device.go; run on one shared H200, not yet on several GPUs) the bucket is
// all-reduced on the device over CUDA IPC on a side stream, the comm goroutine only agreeing over
// the control plane and polling the launch's fence, bounded (abortable kernel waits). With
// `ddp.intra_host: copies` (UsePeerCopies, engine_peer.go; every rank on one host; auto's choice
// where they share one GPU, as measured) the staged path stays but nothing goes to pinned memory: each rank sums its ring segment
// of the bucket out of its peers' device f16 buffers in the ring's order, the ranks meet on the
// host, and each copies its peers' sums — the host ring's bits, no kernel waiting on a peer.
package ddp
