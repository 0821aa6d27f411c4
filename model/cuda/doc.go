// Package cuda is goddp's NVIDIA GPU device, built with the cuda build tag (make cuda; without the
// tag this package is only this comment and ipc_stalled.go's pure function, tested on any machine). Every operation of tensor.Device is enqueued on one
// compute stream in call order, so it returns before the GPU is done; only Download, DownloadI32,
// Sync and a Fence's Wait wait.
//
//	cuda.go             Device, New, Close; memory (the embedded tensor.Pool over cuMemAlloc),
//	                    host transfers, pinned host memory (Pinned, CopyToPinned, CopyFromPinned),
//	                    kernel launches, profiling by events (ProfileStart, ProfileStop)
//	count.go            DeviceCount
//	ops.go              the operations other than matrix products, and AdamWRuns (tensor.MultiAdamW)
//	blas.go             MatMul and BatchedMatMul through cuBLAS (cublasGemmEx, f32 compute)
//	lt.go               tensor.EpilogueDevice and tensor.BiasEpiloguer through cublasLt (cublaslt/)
//	env.go              the environment it reads: every knob, its default and what ran on a GPU
//	kernels.go          the kernels as CUDA C, compiled by NVRTC at first use and cached on disk
//	                    (KernelCacheDir)
//	flash.go            fused causal attention (flash_kernels.go: mma.sync, head size 64, f16)
//	staging.go          tensor.GradStager: gradient buckets through f16 device buffers and pinned
//	                    memory on streams of their own (staging_kernels.go)
//	ipc.go              tensor.IPCDevice: an all-reduce over the ranks' buffers mapped by CUDA IPC,
//	                    one kernel paced by flags in device memory (ipc_kernels.go)
//	ipc_async.go        the same on a side stream, abortable; its halves for the path across hosts
//	ipc_pace.go         GODDP_IPC_WAIT=stream: the ranks' meetings as stream waits around launches
//	                    that never wait (ipc_stalled.go names the peer an abort gave up on); its
//	                    tests passed on an H100 (session 17), measured slower: off
//	ipc_mirror.go       tensor.PeerMirrorDevice: a tensor mapped into the host's other ranks, ranges
//	                    of theirs copied into it on the compute stream (ddp.shard_gather: device;
//	                    not yet run on a GPU)
//	upload_async.go     UploadAsync, a copy-stream upload the compute stream waits for by event
//	fence.go            Fence: an event recorded on the compute stream (events recycled)
//	cudadrv/            the small cgo layer: streams, events, memory, launches, two cuBLAS calls,
//	                    CUDA IPC handles and peer access
//	cudacompat/         a cuda.h that lets gorgonia.org/cu v0.9.6 build against CUDA 13
//	                    (scripts/cuda-env.sh puts it first on the include path)
//
// It imports only model/tensor, model/half and cudadrv (and gorgonia.org/cu for the device, the
// context and NVRTC). The tests compare every operation with the CPU device (model/cpu) as the
// reference; the models' GPU tests are package model's cuda-tagged tests.
package cuda
