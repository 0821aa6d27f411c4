package worker

import (
	"unsafe"

	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

// hostAllocators and asyncUploaders are filled by device builds that stage batches in pinned host
// memory (pinned_cuda.go); each returns nil for a device it does not drive.
var (
	hostAllocators []func(tensor.Device) data.Allocator
	asyncUploaders []func(tensor.Device) func(dst *tensor.Tensor, src unsafe.Pointer)
)

// batchAllocator is the loader's buffer allocator for dev: pinned host memory on a GPU, the Go
// heap otherwise (nil).
func batchAllocator(dev tensor.Device) data.Allocator {
	for _, f := range hostAllocators {
		if a := f(dev); a != nil {
			return a
		}
	}
	return nil
}

// asyncUploader is dev's asynchronous host-to-device copy, or nil (then inputs use Upload).
func asyncUploader(dev tensor.Device) func(dst *tensor.Tensor, src unsafe.Pointer) {
	for _, f := range asyncUploaders {
		if u := f(dev); u != nil {
			return u
		}
	}
	return nil
}
