package worker

import (
	"context"
	"path/filepath"
	"testing"
)

// data.upload_ahead: on trains the run that off trains, bit for bit (the same batches in the same
// order, each micro-step's dropout seed its own), with accumulation and an evaluation after every
// step, and every micro-step after the run's first takes the batch uploaded during the one before.
// A checkpoint written while the next batch was already shown by the loader's Peek (every step's
// end but the last) resumes at that batch: resumed from step 2, the run ends where the
// uninterrupted one ends.
func TestUploadAhead_sameRunAndResume(t *testing.T) {
	sets := []string{"train.grad_accum_steps=2", "model.dropout=0.1", "train.eval_every=1", "train.eval_batches=1"}
	off := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "off"), sets...), Options{})

	dir := filepath.Join(t.TempDir(), "on")
	on := append(sets, "data.upload_ahead=on")
	tr, err := New(context.Background(), resumable(t, dir, on...), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background())
	tr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.ParamSHA256 != off.ParamSHA256 || res.FinalLoss != off.FinalLoss {
		t.Errorf("upload_ahead on: %s, loss %g; off: %s, loss %g", res.ParamSHA256, res.FinalLoss, off.ParamSHA256, off.FinalLoss)
	}
	if want := 4*2 - 1; tr.aheadTaken != want {
		t.Errorf("%d micro-steps took a batch uploaded ahead, want %d (all but the first)", tr.aheadTaken, want)
	}

	again := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "again"), on...), Options{ResumeFrom: stepDir(dir, 2)})
	if again.ParamSHA256 != off.ParamSHA256 {
		t.Errorf("resumed from step 2 of the upload_ahead run: %s, the uninterrupted run %s", again.ParamSHA256, off.ParamSHA256)
	}
}
