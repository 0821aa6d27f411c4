//go:build cuda

package worker

import (
	"math"
	"path/filepath"
	"testing"
)

// On the CUDA device, whose uploads run on a copy stream beside the compute stream: accumulated
// micro-batches train what the CPU device trains with the same settings (the evaluation after the
// run within 1e-4: the same arithmetic, the sums split otherwise and the embedding's and
// LayerNorm's backward adding atomically), which they need not while the upload of micro-batch
// m+1 could land in the buffers micro-batch m's forward and backward still read (their targets,
// their tokens); and data.upload_ahead on trains what off trains (within 1e-5). (Until session
// 16 the first check compared against one micro-batch of twice the size within 1e-3; the H200 ran
// 4.02562 against 4.03074 and the CPU device gives those very numbers: that difference is the
// settings', not a race.)
func TestCUDAUploadAhead_accumulationAndSameRun(t *testing.T) {
	base := []string{"train.schedule=constant", "train.max_steps=6", "model.dropout=0", "precision=fp32", "train.eval_batches=4",
		"train.micro_batch=4", "train.grad_accum_steps=2"}
	run := func(device string, sets ...string) *Result {
		return mustRun(t, tinyGPT(t, append(append([]string{"checkpoint.dir=" + filepath.Join(t.TempDir(), "c")}, base...), sets...)...), Options{Device: device})
	}
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }
	cpu := run("cpu")
	accum := run("cuda")
	if !near(accum.EvalLoss, cpu.EvalLoss, 1e-4) || !near(accum.FinalLoss, cpu.FinalLoss, 1e-4) {
		t.Errorf("micro-batch 4 × 2 accumulated on cuda: loss %g, eval %g; on the CPU: %g, %g", accum.FinalLoss, accum.EvalLoss, cpu.FinalLoss, cpu.EvalLoss)
	}
	ahead := run("cuda", "data.upload_ahead=on")
	if !near(ahead.EvalLoss, accum.EvalLoss, 1e-5) || !near(ahead.FinalLoss, accum.FinalLoss, 1e-5) {
		t.Errorf("data.upload_ahead on: loss %g, eval %g; off: %g, %g", ahead.FinalLoss, ahead.EvalLoss, accum.FinalLoss, accum.EvalLoss)
	}
}
