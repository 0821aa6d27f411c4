package tensor

// HostMemory is an optional Device ability: a device whose tensors live in the process's own
// memory (the CPU device) hands out a tensor's elements as a Go slice, so that the DDP engine's
// communication can work on the gradient and weight slabs in place instead of on host copies
// (ddp.shard_optimizer's stage 2, ddp/shard.go). A device whose memory is elsewhere (CUDA) does
// not have it.
//
// Contract: the slices are the tensor's own memory, valid until the tensor is freed. They may be
// read and written from any goroutine, as long as no device operation (nor another goroutine)
// touches the same elements at the same time: the caller orders those accesses itself (the DDP
// engine hands a bucket to its comm goroutine only once backward has finished writing it).
type HostMemory interface {
	Device
	// HostF32 is t's elements when t is f32.
	HostF32(t *Tensor) []float32
	// HostHalf is t's elements, as their 16 bits, when t is f16 or bf16.
	HostHalf(t *Tensor) []uint16
}
