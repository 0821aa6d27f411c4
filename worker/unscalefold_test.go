package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/worker/observe"
)

// The loss scaler's unscale folded into AdamW's step (GODDP_UNSCALE_FOLD=1: the check reads the
// gradients without writing them back, AdamW multiplies each by 1/scale as it reads it, then by
// the clip factor) trains the very weights the unscaling pass trains, on the CPU device: fp16
// (a dynamic scale) and bf16 (a scale of 1, checked), with clipping that clips (grad_clip 0.05;
// norms here are ~1-3), clipping that does not (100), no clipping (grad_clip 0: odd steps take
// the check alone, even ones measure the norm for the log), and an overflow injected at the second
// step (the check with the norm) or the first (the check alone): skipped. The same final loss, skipped steps, and per step the same loss, loss scale and
// gradient norm. The folded path is the one taken on every step, and on none with the switch off.
func TestUnscaleFold_sameBitsAsAPass(t *testing.T) {
	type run struct {
		res     *Result
		steps   []observe.StepMetrics
		folded  int
		skipped int
	}
	do := func(t *testing.T, fold bool, injectAt int, sets ...string) run {
		if fold {
			t.Setenv("GODDP_UNSCALE_FOLD", "1")
		} else {
			t.Setenv("GODDP_UNSCALE_FOLD", "0")
		}
		res, steps, tr := runTinyMetrics(t, injectAt, sets...)
		folded := tr.unscaleFolded
		return run{res: res, steps: steps, folded: folded, skipped: res.SkippedSteps}
	}
	cases := []struct {
		prec, clip, logEvery string
		injectAt             int // the step (from 0) whose gradients get an inf, or -1
	}{
		{"fp16", "0.05", "1", -1},
		{"fp16", "100", "1", -1},
		{"fp16", "0", "2", -1},
		{"fp16", "0.05", "1", 1}, // the check with the norm finds it
		{"fp16", "0", "2", 0},    // the check alone finds it
		{"bf16", "0.05", "1", -1},
		{"bf16", "0", "2", -1},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s clip %s log every %s inject at %d", c.prec, c.clip, c.logEvery, c.injectAt)
		t.Run(name, func(t *testing.T) {
			sets := []string{"precision=" + c.prec, "train.grad_clip=" + c.clip, "train.log_every=" + c.logEvery}
			on, off := do(t, true, c.injectAt, sets...), do(t, false, c.injectAt, sets...)
			if on.folded != 4 || off.folded != 0 {
				t.Fatalf("steps folded: %d with GODDP_UNSCALE_FOLD=1, %d without; want 4 and 0", on.folded, off.folded)
			}
			if want := map[bool]int{false: 0, true: 1}[c.injectAt >= 0]; on.skipped != want || off.skipped != want {
				t.Errorf("skipped %d folded, %d not; want %d", on.skipped, off.skipped, want)
			}
			if on.res.ParamSHA256 != off.res.ParamSHA256 || on.res.FinalLoss != off.res.FinalLoss {
				t.Errorf("folded %s (loss %g), by a pass %s (loss %g)", on.res.ParamSHA256[:12], on.res.FinalLoss, off.res.ParamSHA256[:12], off.res.FinalLoss)
			}
			if len(on.steps) != len(off.steps) || len(on.steps) == 0 {
				t.Fatalf("%d step lines folded, %d not", len(on.steps), len(off.steps))
			}
			norms := 0
			for i, a := range on.steps {
				b := off.steps[i]
				if a.Step != b.Step || a.Loss != b.Loss || a.LossScale != b.LossScale || fmt.Sprint(deref(a.GradNorm)) != fmt.Sprint(deref(b.GradNorm)) {
					t.Errorf("step %d: folded loss %v scale %v norm %v; by a pass step %d loss %v scale %v norm %v",
						a.Step, a.Loss, a.LossScale, deref(a.GradNorm), b.Step, b.Loss, b.LossScale, deref(b.GradNorm))
				}
				if a.GradNorm != nil {
					norms++
				}
			}
			if norms == 0 {
				t.Error("no step measured a gradient norm")
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Under bf16 with the unscale folded, an inf gradient is still ErrNonFinite (no scaler to skip the
// step), found by the check alone at the step it came in.
func TestUnscaleFold_bf16InfIsAnError(t *testing.T) {
	t.Setenv("GODDP_UNSCALE_FOLD", "1")
	cfg := tinyGPT(t, "precision=bf16", "train.grad_clip=0", "train.max_steps=4", "train.log_every=2", "checkpoint.dir=")
	_, err := Run(context.Background(), cfg, Options{Logger: quiet(), InjectInf: func(step int) bool { return step == 0 }})
	if !errors.Is(err, model.ErrNonFinite) || !strings.Contains(err.Error(), "step 0: inf or NaN gradient") {
		t.Fatalf("bf16, an inf at step 0, the unscale folded: %v, want model.ErrNonFinite", err)
	}
}
