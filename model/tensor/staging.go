package tensor

// GradStager is an optional Device ability: staging ranges of the f32 gradient slab through
// device-side f16 buffers and pinned host memory, so that data-parallel gradient averaging needs
// no whole-device synchronisation per bucket (ddp/engine_gpu.go uses it when the wire is f16).
// The CUDA device implements it (model/cuda/staging.go); the CPU device does not, and the DDP
// engine then takes its host path (Download, all-reduce, Upload).
//
// One bucket's walk, for range i:
//
//	Stage(i, s)  training goroutine: a fused kernel writes f16(grad[lo:hi]·s) into the bucket's
//	             device f16 buffer, in compute-stream order (after the backward work that wrote
//	             the gradients); an event orders a device→pinned-host copy of it on a copy stream.
//	             Returns at once.
//	Host(i)      comm goroutine: waits for that copy's event only (not for the device) and returns
//	             the bucket's pinned half buffer, which the ring all-reduces in place.
//	Return(i)    comm goroutine: enqueues the pinned→device copy and a widen (f16 → f32 into the
//	             slab range) on a return stream. Returns at once.
//	Finish()     training goroutine, after every Return of the step: the compute stream waits (on
//	             the device, by event) for the return stream; later operations see the averaged
//	             gradients. The compute stream never waits for communication before this.
//
// Buffers are allocated once by NewGradStaging and reused every step. Stage and Finish are called
// by the goroutine that drives the device; Host and Return may be called from one other goroutine
// at the same time (the comm goroutine), one bucket at a time, in any order of buckets that have
// been staged. A bucket's pinned buffer belongs to the host from Host(i) until Return(i).
type GradStager interface {
	Device
	// NewGradStaging prepares staging for the element ranges [r[0], r[1]) of grad, an f32 tensor
	// (the gradient slab). Ranges must lie inside grad and must not overlap.
	NewGradStaging(grad *Tensor, ranges [][2]int) (GradStaging, error)
	// PinnedBytes is the page-locked host memory the device holds (staging buffers included).
	PinnedBytes() int64
}

// GradStaging is one staging plan (see GradStager). Close releases its buffers.
type GradStaging interface {
	Stage(i int, scale float32)
	Host(i int) []uint16
	Return(i int)
	Finish()
	// PinnedBytes is this plan's page-locked host memory; DeviceBytes its device f16 buffers.
	PinnedBytes() int64
	DeviceBytes() int64
	// Close waits for the plan's copies and frees its buffers.
	Close()
}
