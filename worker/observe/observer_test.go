package observe

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/goddp/model/tensor"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	steps []StepRecord
	evals []EvalRecord
	sums  []SummaryMetrics
}

func (r *recorder) Step(s StepRecord)        { r.steps = append(r.steps, s) }
func (r *recorder) Eval(e EvalRecord)        { r.evals = append(r.evals, e) }
func (r *recorder) Summary(s SummaryMetrics) { r.sums = append(r.sums, s) }

// The fan-out tells every observer, in order, and skips nil ones.
func TestObservers_fanOut(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	obs := Observers{a, nil, b}
	obs.Step(StepRecord{Step: 1})
	obs.Eval(EvalRecord{Step: 1})
	obs.Summary(SummaryMetrics{Steps: 1})
	for _, r := range []*recorder{a, b} {
		if len(r.steps) != 1 || len(r.evals) != 1 || len(r.sums) != 1 {
			t.Errorf("told %d steps, %d evals, %d summaries; want one each", len(r.steps), len(r.evals), len(r.sums))
		}
	}
}

// MetricsWriter writes a step line only for a record that closes a window, with the window's
// rates, and names its rank.
func TestMetricsWriter_linesFromRecords(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	m, err := OpenMetrics(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	rec := StepRecord{Step: 3, Epoch: 1, Samples: 8, TokensPerSample: 4, Loss: 0.5, LR: 0.003, LossScale: 1, GradNorm: math.NaN(),
		SkippedTotal: 1, Mem: tensor.MemStats{Allocated: 10, Peak: 20}}
	m.Step(rec) // no window: no line
	rec.Window = &Window{Steps: 2, Seconds: 0.5, Data: 100 * time.Millisecond, CommSeconds: 0.25}
	m.Step(rec)
	m.Eval(EvalRecord{Step: 3, Loss: 0.4, Samples: 10, Seconds: 1})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := ReadMetrics(RankPath(p, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Steps) != 1 || len(f.Evals) != 1 {
		t.Fatalf("%d step lines, %d eval lines; want 1 and 1", len(f.Steps), len(f.Evals))
	}
	s := f.Steps[0]
	if s.Rank != 2 || s.SamplesPerSec != 32 || s.TokensPerSec != 128 || s.StepMs != 250 || s.DataMs != 50 || s.LR != 0.003 ||
		s.GradNorm != nil || s.Skipped != 1 || s.CommSeconds != 0.25 || s.MemPeakBytes != 20 {
		t.Errorf("step line %+v", s)
	}
	if e := f.Evals[0]; e.Rank != 2 || e.EvalLoss != 0.4 || e.EvalAccuracy != nil {
		t.Errorf("eval line %+v", e)
	}
}
