package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMetrics_writeRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	m, err := NewMetricsWriter(p)
	if err != nil {
		t.Fatal(err)
	}
	m.Step(StepMetrics{Step: 50, Loss: 0.5, LR: 1e-3, LossScale: 65536, SamplesPerSec: 1000, MemAllocatedBytes: 10, MemPeakBytes: 20})
	// Flushed per line: readable before Close.
	if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), `{"event":"step","step":50,`) || strings.Contains(string(b), "comm_seconds") {
		t.Errorf("first line %q", b)
	}
	m.Eval(EvalMetrics{Step: 100, EvalLoss: 0.1, EvalAccuracy: Float(0.98)})
	m.Summary(SummaryMetrics{Steps: 100, FinalLoss: 0.2, EvalLoss: 0.1, TokensPerSec: 5e4, Precision: "fp16", WorldSize: 2, ParamSHA256: "ab"})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"event":"summary"`) || strings.Contains(lines[2], "eval_accuracy") {
		t.Errorf("lines:\n%s", b)
	}
	f, err := ReadMetrics(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Steps) != 1 || f.Steps[0].LossScale != 65536 || len(f.Evals) != 1 || *f.Evals[0].EvalAccuracy != 0.98 ||
		f.Summary == nil || f.Summary.Precision != "fp16" || f.Summary.EvalAccuracy != nil {
		t.Errorf("read back %+v %+v", f, f.Summary)
	}
	// Nil writer: a no-op.
	var none *MetricsWriter
	none.Step(StepMetrics{})
	if err := none.Close(); err != nil {
		t.Error(err)
	}
	os.WriteFile(p, []byte("{\"event\":\"step\"}\nnot json\n"), 0o644)
	if _, err := ReadMetrics(p); err == nil || !strings.Contains(err.Error(), p+":2") {
		t.Errorf("bad line: %v", err)
	}
}
