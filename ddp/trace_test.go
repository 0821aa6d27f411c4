package ddp

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
)

type span struct {
	name, thread string
	start, end   int64
}

// recTracer is a Tracer that keeps its spans in memory.
type recTracer struct {
	mu    sync.Mutex
	t0    time.Time
	once  sync.Once
	spans []span
}

func (r *recTracer) Now() int64 {
	r.once.Do(func() { r.t0 = time.Now() })
	return int64(time.Since(r.t0))
}

func (r *recTracer) Span(name, thread string, start, end int64, _ map[string]any) {
	r.mu.Lock()
	r.spans = append(r.spans, span{name, thread, start, end})
	r.mu.Unlock()
}

var _ Tracer = (*recTracer)(nil)

// A traced run trains bit-identically to an untraced one, and the tracer gets every bucket's
// all-reduce of every step on the comm thread, on its own clock.
func TestEngine_tracerGetsEveryBucket(t *testing.T) {
	d := makeData(4 * 4 * 2 * 3)
	rc := runCfg{W: 2, b: 4, k: 2, steps: 3, wire: allreduce.WireF32, bucketMB: 0.0005}
	plain := runWorld(t, rc, d)
	rc.traced = true
	traced := runWorld(t, rc, d)
	for r := range traced {
		if traced[r].hash != plain[r].hash {
			t.Errorf("rank %d: traced run's parameters %s, untraced %s", r, traced[r].hash, plain[r].hash)
		}
		buckets := 0
		for _, s := range traced[r].spans {
			if !strings.HasPrefix(s.name, "allreduce bucket ") || s.thread != "comm" || s.end < s.start || s.start < 0 {
				t.Errorf("rank %d: span %+v", r, s)
			}
			buckets++
		}
		if buckets == 0 || buckets%rc.steps != 0 {
			t.Errorf("rank %d: %d all-reduce spans over %d steps", r, buckets, rc.steps)
		}
	}
}
