// Package tensor is the device seam of goddp's model: what layers hand to hardware and what
// hardware gives back. It imports nothing of goddp; the devices
// (model/cpu, model/cuda) implement it and package model's layers, models and optimizers use only
// it, so a layer cannot reach a device's memory except through Device.
//
//	tensor.go   Tensor: a typed, shaped window onto a device Buffer; View, Reshape, ToHost, FromHost
//	dtype.go    DType: F32, F16 and BF16 (stored as their 16 bits), I32; ComputeChecker, an
//	            optional ability: a device refusing a compute dtype (CUDA and bf16, for now)
//	device.go   Device, the interface every layer calls (memory, transfers, elementwise, matmul,
//	            activations, normalisation, embeddings, softmax and attention, loss, reductions,
//	            optimizers) and its argument types; Fence, a point in a device's stream of work
//	            to wait for; MultiAdamW, an optional fused optimizer step; SquareSummer and
//	            CrossEntropyGrad, optional fused reductions
//	conv.go     ConvDevice, an optional ability: Conv2d, BatchNorm, MaxPool2d, GlobalAvgPool and
//	            their backwards on NCHW images (the CPU device has it, the CUDA device not yet);
//	            ConvGeom, AsConv
//	staging.go  GradStager, an optional ability: gradient buckets staged through f16 device buffers
//	            and pinned host memory for the DDP engine (the CUDA device has it)
//	staging_shard.go  ShardStaging, a plan's optional ability: the sharded step's reduce-scatter
//	            (only the owned segment returns) and the weights' all-gather through pinned memory
//	ipc.go      IPCDevice, an optional ability: an all-reduce on the device over the buffers of a
//	            host's ranks (IPCPlan: the schedule, the caller's; the CUDA device has it)
//	hostmem.go  HostMemory, an optional ability: a tensor's elements as a Go slice, for a device
//	            whose memory is the process's (the CPU device), so the DDP engine works in place
//	alloc.go    Pool, the caching allocator every device embeds (Alloc, Free and the counters
//	            MemStats, like torch.cuda.memory_stats), OOMError and CatchOOM, Observable
//	            (allocation events for memory timelines), MemorySummary, SizeClass
//	rng.go      the counter-based generator (Normal, Uniform01, DeriveSeed): element i under seed s
//	            is the same on every device
//	check.go    the shape checks both devices run before an operation
//	gemm.go     GEMM and GEMMShape: the shape rules of MatMul and BatchedMatMul (transposes,
//	            leading dimensions, batch strides), CheckGEMM the devices' check
//
// Dimensions are named as in package model: B batch, T sequence, C width, H heads, hs head size,
// V vocabulary, R rows (all leading dimensions of a tensor read as a matrix).
package tensor
