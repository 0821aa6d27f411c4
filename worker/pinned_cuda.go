//go:build cuda

package worker

// pinned_cuda.go: on the CUDA device, batches are assembled straight into pinned (page-locked)
// host memory by the loader's workers, and uploaded with UploadAsync: the copy runs on the copy
// stream and the compute stream waits for it by an event, so the host never blocks on an upload
// and the copy overlaps the tail of the previous step's kernels.

import (
	"sync"
	"unsafe"

	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

func init() {
	hostAllocators = append(hostAllocators, func(dev tensor.Device) data.Allocator {
		c, ok := dev.(*cuda.Device)
		if !ok {
			return nil
		}
		return &pinnedAllocator{dev: c, bufs: map[unsafe.Pointer]*cuda.Pinned{}}
	})
	asyncUploaders = append(asyncUploaders, func(dev tensor.Device) func(dst *tensor.Tensor, src unsafe.Pointer) {
		c, ok := dev.(*cuda.Device)
		if !ok {
			return nil
		}
		return c.UploadAsync
	})
}

// pinnedAllocator hands out batch buffers from cuMemHostAlloc. Safe for concurrent use (the
// loader's workers allocate).
type pinnedAllocator struct {
	dev  *cuda.Device
	mu   sync.Mutex
	bufs map[unsafe.Pointer]*cuda.Pinned
}

func (a *pinnedAllocator) alloc(bytes int) unsafe.Pointer {
	p, err := a.dev.HostAlloc(int64(max(bytes, 4)))
	if err != nil {
		panic(err) // the loader has no error path for buffers; pinned memory runs out only with the host's
	}
	ptr := unsafe.Pointer(unsafe.SliceData(p.F32()))
	a.mu.Lock()
	a.bufs[ptr] = p
	a.mu.Unlock()
	return ptr
}

func (a *pinnedAllocator) Float32s(n int) []float32 {
	return unsafe.Slice((*float32)(a.alloc(4*n)), n)
}

func (a *pinnedAllocator) Int32s(n int) []int32 {
	return unsafe.Slice((*int32)(a.alloc(4*n)), n)
}

func (a *pinnedAllocator) Free(buf any) {
	var ptr unsafe.Pointer
	switch v := buf.(type) {
	case []float32:
		ptr = unsafe.Pointer(unsafe.SliceData(v))
	case []int32:
		ptr = unsafe.Pointer(unsafe.SliceData(v))
	}
	a.mu.Lock()
	p := a.bufs[ptr]
	delete(a.bufs, ptr)
	a.mu.Unlock()
	if p != nil {
		p.Free()
	}
}

var (
	_ data.Allocator = (*pinnedAllocator)(nil)
	_ data.Freer     = (*pinnedAllocator)(nil)
)
