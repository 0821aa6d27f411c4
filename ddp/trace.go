package ddp

// Tracer receives the engine's spans: the all-reduce of each bucket, and on the staged GPU path
// the wait for each bucket's copy to pinned memory, on the "comm" thread. The engine opens no
// file: worker/observe's Trace writes them (with the trainer's forward, backward and optimizer
// spans) as Chrome trace events. A nil Options.Tracer traces nothing.
type Tracer interface {
	// Now is the tracer's clock in nanoseconds, counted from an origin of its choosing and never
	// going back; spans are given on it, and the engine times its buckets and backward with it
	// (the comm statistics too), so that they line up with the caller's spans. The engine calls
	// it from the training goroutine and from its comm goroutines at once.
	Now() int64
	// Span records [start, end) on the named thread ("compute" or "comm"), with optional args
	// (the tracer may keep the map). The engine calls it from the training goroutine (in Wait);
	// the caller may call it from others at the same time. Both methods must be safe for
	// concurrent use and quick: no I/O.
	Span(name, thread string, start, end int64, args map[string]any)
}
