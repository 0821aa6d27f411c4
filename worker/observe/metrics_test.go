package observe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
)

func TestMetrics_writeRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	m, err := NewMetricsWriter(p)
	if err != nil {
		t.Fatal(err)
	}
	m.WriteStep(StepMetrics{Step: 50, Loss: 0.5, LR: 1e-3, LossScale: 65536, SamplesPerSec: 1000, MemAllocatedBytes: 10, MemPeakBytes: 20})
	// Flushed per line: readable before Close.
	if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), `{"event":"step","step":50,`) || strings.Contains(string(b), "comm_seconds") {
		t.Errorf("first line %q", b)
	}
	m.WriteEval(EvalMetrics{Step: 100, EvalLoss: 0.1, EvalAccuracy: Float(0.98)})
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
	none.WriteStep(StepMetrics{})
	none.Step(StepRecord{Window: &Window{Steps: 1, Seconds: 1}})
	if err := none.Close(); err != nil {
		t.Error(err)
	}
	os.WriteFile(p, []byte("{\"event\":\"step\"}\nnot json\n"), 0o644)
	if _, err := ReadMetrics(p); err == nil || !strings.Contains(err.Error(), p+":2") {
		t.Errorf("bad line: %v", err)
	}
}

// The lr of a metrics line is the float32 the optimizer used, written as its shortest decimal.
func TestDecimalF32(t *testing.T) {
	if got := decimalF32(float32(0.003)); got != 0.003 {
		t.Errorf("decimalF32(0.003) = %v", got)
	}
	for _, x := range []float32{3e-4, 1e-3, 0.1, 6e-5 * 0.37, 1, 1e-8} {
		if float32(decimalF32(x)) != x {
			t.Errorf("float32(decimalF32(%v)) = %v", x, float32(decimalF32(x)))
		}
	}
	b, _ := json.Marshal(StepMetrics{LR: decimalF32(model.ConstantLR(0.003)(0))})
	if !strings.Contains(string(b), `"lr":0.003,`) {
		t.Errorf("step line %s", b)
	}
}
