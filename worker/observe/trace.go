package observe

// trace.go: --trace, the run's timeline as Chrome trace events (open in Perfetto or
// chrome://tracing): one process per rank, a "compute" and a "comm" thread, so all-reduces can be
// seen running under backward. The loop adds its forward, backward and optimizer spans; the DDP
// engine, given the Trace as its ddp.Tracer, its all-reduce spans. Written once, at the end.

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/goddp/goddp/ddp"
)

// Trace collects spans in memory and writes them with WriteFile. A nil *Trace is valid and records
// nothing (tracing off), so the loop calls it unconditionally; do not hand a nil *Trace to ddp as
// its Tracer (a non-nil interface holding nil): leave Options.Tracer nil instead. Safe for
// concurrent use.
type Trace struct {
	mu     sync.Mutex
	rank   int
	epoch  time.Time
	events []traceEvent
}

var _ ddp.Tracer = (*Trace)(nil)

type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`  // µs
	Dur  float64        `json:"dur"` // µs
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// NewTrace starts a trace for rank; times are counted from now.
func NewTrace(rank int) *Trace { return &Trace{rank: rank, epoch: time.Now()} }

// Now is the trace clock in ns (0 on a nil trace: tracing off).
func (t *Trace) Now() int64 {
	if t == nil {
		return 0
	}
	return int64(time.Since(t.epoch))
}

// Span records [start, end) ns on the named thread ("compute" or "comm").
func (t *Trace) Span(name, thread string, start, end int64, args map[string]any) {
	if t == nil {
		return
	}
	tid := 0
	if thread == "comm" {
		tid = 1
	}
	t.mu.Lock()
	t.events = append(t.events, traceEvent{Name: name, Ph: "X", Ts: float64(start) / 1e3, Dur: float64(end-start) / 1e3, Pid: t.rank, Tid: tid, Args: args})
	t.mu.Unlock()
}

// WriteFile writes the trace, with thread names, to path (atomically: a temporary file renamed).
func (t *Trace) WriteFile(path string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	meta := []map[string]any{
		{"name": "process_name", "ph": "M", "pid": t.rank, "args": map[string]any{"name": fmt.Sprintf("rank %d", t.rank)}},
		{"name": "thread_name", "ph": "M", "pid": t.rank, "tid": 0, "args": map[string]any{"name": "compute"}},
		{"name": "thread_name", "ph": "M", "pid": t.rank, "tid": 1, "args": map[string]any{"name": "comm"}},
	}
	all := make([]any, 0, len(meta)+len(t.events))
	for _, m := range meta {
		all = append(all, m)
	}
	for _, e := range t.events {
		all = append(all, e)
	}
	b, err := json.Marshal(map[string]any{"traceEvents": all, "displayTimeUnit": "ms"})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("ddp: writing trace %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
