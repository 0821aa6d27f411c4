package tensor

// IPCStreamDevice is an optional ability of an IPCDevice: its all-reduces run on a side stream
// while the compute stream goes on (backward), and every wait inside them can be aborted by the
// host. The DDP engine's device path (ddp/engine_device.go, `ddp.intra_host: device`) uses it:
//
//	s := NewIPCStream()            once
//	per bucket, in the same order on every rank:
//	  (the bucket's values written into the reducer's buffer on the compute stream)
//	  s.Fork()                     the side stream waits (by event) for the compute stream so far
//	  f := red.Launch(s, sc, div)  the all-reduce, enqueued on the side stream; f passes after it
//	s.Join()                       the compute stream waits (by event) for the side stream so far:
//	                               the optimizer's reads are ordered after every all-reduce
//
// A peer that never arrives (dead, or stopped) would keep a kernel waiting for ever: IPC does not
// notice. Abort (from any goroutine, no device call) makes every wait of this rank's kernels give
// up; the all-reduce in flight then leaves its buffer undefined, and Stalled says which peer a
// kernel was waiting for. The host decides when to abort (the control plane's verdict, or a
// deadline); the device never spins unbounded once it has.
type IPCStreamDevice interface {
	IPCDevice
	NewIPCStream() (IPCStream, error)
}

// IPCStream is a side stream of the device (see IPCStreamDevice).
type IPCStream interface {
	Fork()
	Join()
	Close() error
}

// IPCAsyncReducer is the side-stream ability of an IPCReducer made by an IPCStreamDevice.
type IPCAsyncReducer interface {
	IPCReducer
	// Launch enqueues the all-reduce of the reducer's buffer on s: every rank's value times scale,
	// added in f32 in the plan's order, the sum divided by div, rounded once to the buffer's
	// dtype. It returns a fence that passes when the all-reduce has finished (or given up).
	Launch(s IPCStream, scale, div float32) Fence
	// Abort makes this rank's waits give up, now and in every later launch. Safe from any
	// goroutine, while a launch runs.
	Abort()
	// Stalled returns the rank a kernel of this reducer gave up waiting for after Abort, or -1.
	Stalled() int
}
