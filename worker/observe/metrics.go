package observe

// metrics.go: the machine-readable record of a run. With --metrics FILE the
// trainer writes JSON lines, one object per line, each flushed as written so
// that `tail -f` and a crash both see every line:
//
//	{"event":"step","step":50,"epoch":0,"rank":0,"time":"2026-05-01T12:00:00.123Z","loss":0.41,"lr":0.001,...}
//	{"event":"eval","step":469,"epoch":0,"rank":0,"time":"…","eval_loss":0.09,"eval_accuracy":0.972,"samples":10000,"seconds":1.2}
//	{"event":"summary","steps":1407,"final_loss":0.05,...,"param_sha256":"…"}
//
// ReadMetrics reads such a file back, for plots and tests. The same numbers are served to
// Prometheus by prom.go (metrics.listen, --metrics-port). MetricsWriter is an Observer: it
// writes a step line for each StepRecord that closes a window, an eval line for each EvalRecord,
// and the summary.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goddp/goddp/model/tensor"
)

// StepMetrics is one {"event":"step"} line, written every train.log_every
// steps.
type StepMetrics struct {
	Event string    `json:"event"` // "step" (filled by Step)
	Step  int       `json:"step"`  // optimizer steps done
	Epoch int       `json:"epoch"`
	Rank  int       `json:"rank"`
	Time  time.Time `json:"time"` // when the line was written (UTC, RFC 3339, milliseconds)
	Loss  float64   `json:"loss"` // the loss of the line's step
	// LR is the learning rate of the line's step: the float32 the optimizer used, written as
	// its shortest decimal (0.003, not 0.0030000000000000001 or 0.00299999993).
	LR        float64 `json:"lr"`
	LossScale float64 `json:"loss_scale"`
	// GradNorm is the global L2 norm of the line's step's gradients (unscaled, before clipping).
	// With train.grad_clip it is the norm clipping computed; without, it is measured for the
	// line's step only, which costs one pass over the gradient slab (SumSquares) and one read of
	// the result back to the host per line: the host waits there for the all-reduced gradients,
	// which the step's end waits for anyway. Absent for a skipped step (an inf/NaN gradient).
	GradNorm          *float64 `json:"grad_norm,omitempty"`
	Skipped           int      `json:"skipped"` // steps skipped for inf/NaN so far
	SamplesPerSec     float64  `json:"samples_per_sec"`
	TokensPerSec      float64  `json:"tokens_per_sec,omitempty"` // language models
	MemAllocatedBytes int64    `json:"mem_allocated_bytes"`
	MemPeakBytes      int64    `json:"mem_peak_bytes"`
	CommSeconds       float64  `json:"comm_seconds,omitempty"` // all-reduce time since the last line (world > 1)
	// StepMs is the mean wall time of a step since the last line; DataMs the part of it the loop
	// spent waiting for batches (loader.Next) and issuing their uploads: the device waits on data
	// at most that long.
	StepMs float64 `json:"step_ms,omitempty"`
	DataMs float64 `json:"data_ms,omitempty"`
}

// EvalMetrics is one {"event":"eval"} line.
type EvalMetrics struct {
	Event        string    `json:"event"` // "eval" (filled by Eval)
	Step         int       `json:"step"`
	Epoch        int       `json:"epoch"`
	Rank         int       `json:"rank"`
	Time         time.Time `json:"time"`
	EvalLoss     float64   `json:"eval_loss"`
	EvalAccuracy *float64  `json:"eval_accuracy,omitempty"` // classification only
	Samples      int       `json:"samples"`                 // eval samples over all ranks (a language model's: sequences)
	Seconds      float64   `json:"seconds"`                 // wall time of the evaluation
}

// SummaryMetrics is the last line, {"event":"summary"}.
type SummaryMetrics struct {
	Event              string   `json:"event"` // "summary" (filled by Summary)
	Steps              int      `json:"steps"`
	FinalLoss          float64  `json:"final_loss"`
	EvalLoss           float64  `json:"eval_loss"`
	EvalAccuracy       *float64 `json:"eval_accuracy,omitempty"` // classification only
	SamplesPerSec      float64  `json:"samples_per_sec"`
	TokensPerSec       float64  `json:"tokens_per_sec,omitempty"` // language models only
	PeakMemoryBytes    int64    `json:"peak_memory_bytes"`
	SkippedSteps       int      `json:"skipped_steps"`
	Precision          string   `json:"precision"`
	WorldSize          int      `json:"world_size"`
	Rank               int      `json:"rank"`
	WallSeconds        float64  `json:"wall_seconds"`
	ParamSHA256        string   `json:"param_sha256"`             // sha256 of the final FP32 parameters
	BuffersSHA256      string   `json:"buffers_sha256,omitempty"` // sha256 of this rank's final buffers (BN running statistics), equal on every rank
	MicroBatch         int      `json:"micro_batch"`
	GradAccumSteps     int      `json:"grad_accum_steps"`
	CommSeconds        float64  `json:"comm_seconds"`
	CommHiddenFraction float64  `json:"comm_hidden_fraction"` // share of all-reduce time overlapped with backward
}

// Float returns a pointer to v, for the optional fields (EvalAccuracy).
func Float(v float64) *float64 { return &v }

// Finite is Float(v), or nil for NaN and ±Inf (which JSON cannot write).
func Finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// decimalF32 is x as the float64 of its shortest decimal: float32(0.003) is 0.003, not
// float64(float32(0.003)) = 0.003000000026077032. float32(decimalF32(x)) == x.
func decimalF32(x float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	return v
}

// metricsTime is a line's timestamp: now, in UTC, to the millisecond.
func metricsTime() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// MetricsWriter writes metric lines to a file. A nil *MetricsWriter is valid
// and writes nothing, so the trainer can call it unconditionally. Safe for
// concurrent use.
type MetricsWriter struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	err  error // first write error, reported by Close
	rank int   // the rank its lines name (OpenMetrics)
}

var _ Observer = (*MetricsWriter)(nil)

// NewMetricsWriter creates (truncates) path. An empty path returns a nil
// writer that drops everything.
func NewMetricsWriter(path string) (*MetricsWriter, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &MetricsWriter{f: f, w: bufio.NewWriter(f)}, nil
}

// Step writes r's step line when r closes a window (Observer).
func (m *MetricsWriter) Step(r StepRecord) {
	if m == nil || r.Window == nil {
		return
	}
	w := r.Window
	sps := r.SamplesPerSec()
	m.WriteStep(StepMetrics{Step: r.Step, Epoch: r.Epoch, Rank: m.rank, Time: metricsTime(),
		Loss: r.Loss, LR: decimalF32(r.LR), LossScale: r.LossScale, GradNorm: Finite(r.GradNorm), Skipped: r.SkippedTotal,
		SamplesPerSec: sps, TokensPerSec: sps * float64(r.TokensPerSample), MemAllocatedBytes: r.Mem.Allocated, MemPeakBytes: r.Mem.Peak,
		CommSeconds: w.CommSeconds, StepMs: 1000 * w.Seconds / float64(w.Steps),
		DataMs: float64(w.Data.Microseconds()) / 1000 / float64(w.Steps)})
}

// Eval writes r's eval line (Observer).
func (m *MetricsWriter) Eval(r EvalRecord) {
	if m == nil {
		return
	}
	m.WriteEval(EvalMetrics{Step: r.Step, Epoch: r.Epoch, Rank: m.rank, Time: metricsTime(),
		EvalLoss: r.Loss, EvalAccuracy: r.Accuracy, Samples: r.Samples, Seconds: r.Seconds})
}

// WriteStep writes a step line as it is.
func (m *MetricsWriter) WriteStep(s StepMetrics) { s.Event = "step"; m.write(s) }

// WriteEval writes an eval line as it is.
func (m *MetricsWriter) WriteEval(e EvalMetrics) { e.Event = "eval"; m.write(e) }

// Summary writes the summary line.
func (m *MetricsWriter) Summary(s SummaryMetrics) { s.Event = "summary"; m.write(s) }

func (m *MetricsWriter) write(v any) {
	if m == nil {
		return
	}
	b, err := json.Marshal(v)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return
	}
	if err != nil {
		m.err = fmt.Errorf("metrics: %w", err) // NaN or Inf loss
		return
	}
	m.w.Write(b)
	m.w.WriteByte('\n')
	if err := m.w.Flush(); err != nil {
		m.err = fmt.Errorf("metrics: %s: %w", m.f.Name(), err)
	}
}

// Close flushes and closes the file and returns the first error met.
func (m *MetricsWriter) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return m.err
	}
	if err := m.f.Close(); err != nil && m.err == nil {
		m.err = fmt.Errorf("metrics: %w", err)
	}
	m.f = nil
	return m.err
}

// MetricsFile is a metrics file read back.
type MetricsFile struct {
	Steps   []StepMetrics
	Evals   []EvalMetrics
	Summary *SummaryMetrics // nil when the run did not finish
}

// ReadMetrics reads a JSON-lines metrics file. Lines of unknown events are
// skipped; a malformed line is an error naming its line number.
func ReadMetrics(path string) (*MetricsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer f.Close()
	out := &MetricsFile{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("metrics: %s:%d: %v", path, n, err)
		}
		var target any
		switch ev.Event {
		case "step":
			out.Steps = append(out.Steps, StepMetrics{})
			target = &out.Steps[len(out.Steps)-1]
		case "eval":
			out.Evals = append(out.Evals, EvalMetrics{})
			target = &out.Evals[len(out.Evals)-1]
		case "summary":
			out.Summary = &SummaryMetrics{}
			target = out.Summary
		default:
			continue
		}
		if err := json.Unmarshal(line, target); err != nil {
			return nil, fmt.Errorf("metrics: %s:%d: %v", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", path, err)
	}
	return out, nil
}

// FormatSummary is the human line ddptrain prints at the end.
func FormatSummary(s *SummaryMetrics) string {
	var b strings.Builder
	fmt.Fprintf(&b, "steps %d  final loss %.4f  eval loss %.4f", s.Steps, s.FinalLoss, s.EvalLoss)
	if s.EvalAccuracy != nil {
		fmt.Fprintf(&b, "  eval accuracy %.2f%%", 100**s.EvalAccuracy)
	}
	if s.TokensPerSec > 0 {
		fmt.Fprintf(&b, "  %.0f tokens/s", s.TokensPerSec)
	} else {
		fmt.Fprintf(&b, "  %.0f samples/s", s.SamplesPerSec)
	}
	fmt.Fprintf(&b, "  peak mem %s  skipped %d  %s  world %d  %.1fs  param_sha256 %s",
		tensor.FormatBytes(s.PeakMemoryBytes), s.SkippedSteps, s.Precision, s.WorldSize, s.WallSeconds, s.ParamSHA256)
	if s.WorldSize > 1 {
		fmt.Fprintf(&b, "  comm %.2fs (%.0f%% hidden)", s.CommSeconds, 100*s.CommHiddenFraction)
	}
	return b.String()
}

// OpenMetrics opens --metrics for this rank: rank 0 writes path itself, rank r > 0 writes
// path with ".rank<r>" before its extension (every rank's summary carries its param_sha256).
func OpenMetrics(path string, rank int) (*MetricsWriter, error) {
	if path != "" && rank != 0 {
		path = RankPath(path, rank)
	}
	m, err := NewMetricsWriter(path)
	if m != nil {
		m.rank = rank
	}
	return m, err
}

// RankPath is where rank r's copy of a per-rank output file goes: m.jsonl → m.rank1.jsonl.
func RankPath(path string, rank int) string {
	if rank == 0 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + fmt.Sprintf(".rank%d", rank) + ext
}
