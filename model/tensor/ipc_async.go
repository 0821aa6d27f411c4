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

// IPCHalfReducer is the ability of an IPCAsyncReducer to run the two halves of its all-reduce
// apart, with this rank's segment in page-locked host memory between them: the DDP engine's
// device path across hosts (ddp/engine_device.go) reduces inside the host on the device, carries
// each rank's segment between hosts on the host ring, and gathers inside the host on the device.
//
//	p := PinSegment()             once: this rank's segment's bytes in page-locked host memory
//	f := ReduceScatter(s, sc, d)  side stream: meet, reduce this rank's segment (as Launch does),
//	                              then copy it into p; f passes when the copy has landed
//	(the caller all-reduces p in place with the other hosts)
//	g := AllGather(s)             side stream: copy p into this rank's segment, meet (every rank's
//	                              segment final), copy every other segment from its owner, meet
//
// The ranks of a host launch the halves in the same order (a stream runs its kernels in order,
// and a half waits for its namesake on every peer). The waits are abortable as Launch's are.
//
// Without PinSegment the halves run alone, with no copies (ddp.shard_optimizer on the device
// path: the reduce half leaves each rank its segment of a gradient bucket; the gather half fills
// a weight bucket's other segments from their owners). A reduce half alone then ends in a meeting:
// when its fence passes, no peer reads this rank's buffer any more, so the caller may rewrite it
// (with a pinned segment the gather half that must follow gives that).
type IPCHalfReducer interface {
	IPCAsyncReducer
	// PinSegment allocates (on the first call) and returns this rank's segment in page-locked
	// host memory: the buffer's dtype's little-endian bytes (4 per element for f32, 2 for f16
	// and bf16). It stays valid until Close.
	PinSegment() ([]byte, error)
	ReduceScatter(s IPCStream, scale, div float32) Fence
	AllGather(s IPCStream) Fence
}
