//go:build cuda

package worker

import (
	"math"
	"path/filepath"
	"testing"
)

// On the CUDA device, whose uploads run on a copy stream beside the compute stream: accumulation
// trains what one micro-batch of twice the size trains (the evaluation after the run within 1e-3:
// the sums are split otherwise, and the embedding's and LayerNorm's backward add atomically),
// which it need not have while the upload of micro-batch m+1 could land in the buffers
// micro-batch m's forward and backward still read (their targets, their tokens); and
// data.upload_ahead on trains what off trains (within 1e-5: the same arithmetic, the atomics'
// order aside). Not yet run on a GPU.
func TestCUDAUploadAhead_accumulationAndSameRun(t *testing.T) {
	opt := Options{Device: "cuda"}
	base := []string{"train.schedule=constant", "train.max_steps=6", "model.dropout=0", "precision=fp32", "train.eval_batches=4"}
	run := func(sets ...string) *Result {
		return mustRun(t, tinyGPT(t, append(append([]string{"checkpoint.dir=" + filepath.Join(t.TempDir(), "c")}, base...), sets...)...), opt)
	}
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }
	whole := run("train.micro_batch=8", "train.grad_accum_steps=1")
	accum := run("train.micro_batch=4", "train.grad_accum_steps=2")
	if !near(accum.EvalLoss, whole.EvalLoss, 1e-3) {
		t.Errorf("micro-batch 4 × 2 accumulated: eval loss %g; micro-batch 8: %g", accum.EvalLoss, whole.EvalLoss)
	}
	ahead := run("train.micro_batch=4", "train.grad_accum_steps=2", "data.upload_ahead=on")
	if !near(ahead.EvalLoss, accum.EvalLoss, 1e-5) || !near(ahead.FinalLoss, accum.FinalLoss, 1e-5) {
		t.Errorf("data.upload_ahead on: loss %g, eval %g; off: %g, %g", ahead.FinalLoss, ahead.EvalLoss, accum.FinalLoss, accum.EvalLoss)
	}
}
