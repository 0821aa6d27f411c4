package worker

// metrics.go: the machine-readable record of a run. With --metrics FILE the
// trainer writes JSON lines, one object per line, each flushed as written so
// that `tail -f` and a crash both see every line:
//
//	{"event":"step","step":50,"epoch":0,"loss":0.41,"lr":0.001,...}
//	{"event":"eval","step":469,"epoch":0,"eval_loss":0.09,"eval_accuracy":0.972}
//	{"event":"summary","steps":1407,"final_loss":0.05,...,"param_sha256":"…"}
//
// ReadMetrics reads such a file back, for plots and tests.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// StepMetrics is one {"event":"step"} line, written every train.log_every
// steps.
type StepMetrics struct {
	Event             string  `json:"event"` // "step" (filled by Step)
	Step              int     `json:"step"`  // optimizer steps done
	Epoch             int     `json:"epoch"`
	Loss              float64 `json:"loss"` // mean over the steps since the last line
	LR                float64 `json:"lr"`
	LossScale         float64 `json:"loss_scale"`
	Skipped           int     `json:"skipped"` // steps skipped for inf/NaN so far
	SamplesPerSec     float64 `json:"samples_per_sec"`
	TokensPerSec      float64 `json:"tokens_per_sec,omitempty"` // language models
	MemAllocatedBytes int64   `json:"mem_allocated_bytes"`
	MemPeakBytes      int64   `json:"mem_peak_bytes"`
	CommSeconds       float64 `json:"comm_seconds,omitempty"` // all-reduce time since the last line
	// StepMs is the mean wall time of a step since the last line; DataMs the part of it the loop
	// spent waiting for batches (loader.Next) and issuing their uploads: the device waits on data
	// at most that long.
	StepMs float64 `json:"step_ms,omitempty"`
	DataMs float64 `json:"data_ms,omitempty"`
}

// EvalMetrics is one {"event":"eval"} line.
type EvalMetrics struct {
	Event        string   `json:"event"` // "eval" (filled by Eval)
	Step         int      `json:"step"`
	Epoch        int      `json:"epoch"`
	EvalLoss     float64  `json:"eval_loss"`
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"` // classification only
	Samples      int      `json:"samples"`
	Seconds      float64  `json:"seconds"`
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
	ParamSHA256        string   `json:"param_sha256"` // sha256 of the final FP32 parameters
	MicroBatch         int      `json:"micro_batch"`
	GradAccumSteps     int      `json:"grad_accum_steps"`
	CommSeconds        float64  `json:"comm_seconds"`
	CommHiddenFraction float64  `json:"comm_hidden_fraction"` // share of all-reduce time overlapped with backward
}

// Float returns a pointer to v, for the optional fields (EvalAccuracy).
func Float(v float64) *float64 { return &v }

// MetricsWriter writes metric lines to a file. A nil *MetricsWriter is valid
// and writes nothing, so the trainer can call it unconditionally. Safe for
// concurrent use.
type MetricsWriter struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error // first write error, reported by Close
}

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

// Step writes a step line.
func (m *MetricsWriter) Step(s StepMetrics) { s.Event = "step"; m.write(s) }

// Eval writes an eval line.
func (m *MetricsWriter) Eval(e EvalMetrics) { e.Event = "eval"; m.write(e) }

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
