//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// UploadAsync copies dst.Bytes() bytes from host memory at src into dst on the copy stream and
// makes the compute stream wait for the copy (an event), so it returns at once and the copy
// overlaps whatever the compute stream is still running. From pinned memory (HostAlloc) the copy
// is truly asynchronous; from pageable memory the driver stages it first. The host must not change
// src until the compute stream has passed this point (a later Download or Sync).
func (d *Device) UploadAsync(dst *tensor.Tensor, src unsafe.Pointer) {
	if src == nil {
		panic(fmt.Sprintf("cuda: UploadAsync into %s from nil", dst))
	}
	d.enter()
	defer d.leave()
	ev, err := cudadrv.NewEvent(false)
	must(err)
	must(cudadrv.HtoD(dptr(dst), src, dst.Bytes(), d.copyS))
	must(ev.Record(d.copyS))
	must(d.stream.Wait(ev))
	must(ev.Destroy()) // released by the driver once the event has completed
}
