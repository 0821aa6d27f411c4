//go:build cuda

package cuda

import (
	"runtime"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// Fences (tensor.Fence): Fence records an event on the compute stream after the work enqueued so
// far; Wait is cuEventSynchronize on it, Done cuEventQuery. A spent fence's event goes back to the
// device's free list and the next Fence records it again, so a step's fences cost no event
// creation after the first; a fence dropped unspent gives its event back when collected (no CUDA
// call then: re-recording an event nobody waits for is allowed).

var _ tensor.Fence = (*fence)(nil)

type fence struct {
	d       *Device
	ev      cudadrv.Event
	spent   bool
	cleanup runtime.Cleanup
}

// Fence marks the point after all work enqueued so far on the compute stream (not the copy
// stream): see tensor.Fence.
func (d *Device) Fence() tensor.Fence {
	d.enter()
	defer d.leave()
	ev := d.takeEvent()
	must(ev.Record(d.stream))
	f := &fence{d: d, ev: ev}
	f.cleanup = runtime.AddCleanup(f, func(ev cudadrv.Event) { d.putEvent(ev) }, ev)
	return f
}

// Wait blocks until the work before the fence is done.
func (f *fence) Wait() {
	if f.spent {
		return
	}
	f.d.enter()
	defer f.d.leave()
	must(f.ev.Sync())
	f.spend()
}

// Done reports, without blocking, whether the work before the fence is done.
func (f *fence) Done() bool {
	if f.spent {
		return true
	}
	f.d.enter()
	defer f.d.leave()
	done, err := f.ev.Query()
	must(err)
	if done {
		f.spend()
	}
	return done
}

// spend gives the event back for the next Fence.
func (f *fence) spend() {
	f.spent = true
	f.cleanup.Stop()
	f.d.putEvent(f.ev)
}

// takeEvent returns a free event, or a new one (timing off: recording is cheaper). The caller
// holds the thread (enter).
func (d *Device) takeEvent() cudadrv.Event {
	d.evMu.Lock()
	if n := len(d.evFree); n > 0 {
		ev := d.evFree[n-1]
		d.evFree = d.evFree[:n-1]
		d.evMu.Unlock()
		return ev
	}
	d.evMu.Unlock()
	ev, err := cudadrv.NewEvent(false)
	must(err)
	return ev
}

func (d *Device) putEvent(ev cudadrv.Event) {
	d.evMu.Lock()
	d.evFree = append(d.evFree, ev)
	d.evMu.Unlock()
}

// fenceEvents is how many events wait on the free list (tests).
func (d *Device) fenceEvents() int {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	return len(d.evFree)
}
