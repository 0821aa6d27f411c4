package worker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/goddp/goddp/worker/observe"
)

// GODDP_STEP_END_WAIT=0 (the losses read with the scaler's read-back, no wait for the optimizer
// at the step's end) reports the same losses and trains the same weights as the waiting step end,
// fp16 (a read-back every step) with clipping and with an overflow skipped, bf16 (checked) and
// fp32 (no read-back: the loss read stays behind the optimizer), with accumulation.
func TestStepEnd_noWaitSameRun(t *testing.T) {
	do := func(t *testing.T, wait string, injectAt int, sets ...string) (*Result, []observe.StepMetrics) {
		t.Setenv("GODDP_STEP_END_WAIT", wait)
		res, steps, _ := runTinyMetrics(t, injectAt, sets...)
		return res, steps
	}
	for _, c := range []struct {
		prec, clip string
		accum      int
		injectAt   int
	}{{"fp16", "0.05", 1, -1}, {"fp16", "0", 2, 1}, {"bf16", "0.05", 1, -1}, {"fp32", "0", 2, -1}} {
		t.Run(fmt.Sprintf("%s clip %s accum %d inject %d", c.prec, c.clip, c.accum, c.injectAt), func(t *testing.T) {
			sets := []string{"precision=" + c.prec, "train.grad_clip=" + c.clip, fmt.Sprintf("train.grad_accum_steps=%d", c.accum)}
			wr, ws := do(t, "1", c.injectAt, sets...)
			nr, ns := do(t, "0", c.injectAt, sets...)
			if wr.ParamSHA256 != nr.ParamSHA256 || wr.FinalLoss != nr.FinalLoss || wr.SkippedSteps != nr.SkippedSteps {
				t.Fatalf("waiting: hash %s loss %v skipped %d; not waiting: %s %v %d", wr.ParamSHA256, wr.FinalLoss, wr.SkippedSteps, nr.ParamSHA256, nr.FinalLoss, nr.SkippedSteps)
			}
			if len(ws) != len(ns) || len(ws) != 4 {
				t.Fatalf("%d and %d step lines, want 4", len(ws), len(ns))
			}
			for i := range ws {
				if ws[i].Loss != ns[i].Loss {
					t.Errorf("step %d: loss %v waiting, %v not", i+1, ws[i].Loss, ns[i].Loss)
				}
			}
		})
	}
}

// runTinyMetrics trains tinyGPT with sets for 4 steps, a metrics line each (an inf injected into
// the gradients of step injectAt, from 0, unless it is negative), and returns the summary, the
// step lines and the closed trainer (for its counters).
func runTinyMetrics(t *testing.T, injectAt int, sets ...string) (*Result, []observe.StepMetrics, *Trainer) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.jsonl")
	cfg := tinyGPT(t, append([]string{"train.max_steps=4", "train.log_every=1", "checkpoint.dir="}, sets...)...)
	opt := Options{Logger: quiet(), MetricsPath: p}
	if injectAt >= 0 {
		opt.InjectInf = func(step int) bool { return step == injectAt }
	}
	tr, err := New(context.Background(), cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background())
	if err = errors.Join(err, tr.Close()); err != nil {
		t.Fatal(err)
	}
	f, err := observe.ReadMetrics(p)
	if err != nil {
		t.Fatal(err)
	}
	return res, f.Steps, tr
}
