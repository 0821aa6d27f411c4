package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker/checkpoint"
)

// resumable is a tiny GPT run under the constant schedule (so train.max_steps is not part of its
// trajectory) with a checkpoint at every step in dir.
func resumable(t *testing.T, dir string, sets ...string) *Config {
	t.Helper()
	return tinyGPT(t, append([]string{"train.micro_batch=4", "train.schedule=constant", "train.max_steps=4",
		"checkpoint.dir=" + dir, "checkpoint.every=1", "checkpoint.keep=10"}, sets...)...)
}

func mustRun(t *testing.T, cfg *Config, opt Options) *Result {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quiet()
	}
	res, err := Run(context.Background(), cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func stepDir(dir string, step int) string {
	return checkpoint.StepDir(dir, step)
}

// Keys the trajectory does not depend on may change between a run and its resume: the resumed run
// continues from the checkpoint and ends where the uninterrupted run ends.
func TestResume_nonTrajectoryKeysMayChange(t *testing.T) {
	straight := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "a")), Options{})
	dir := filepath.Join(t.TempDir(), "b")
	mustRun(t, resumable(t, dir, "train.max_steps=2"), Options{})
	cfg := resumable(t, dir, "checkpoint.keep=3", "checkpoint.every=2", "train.eval_every=1", "train.log_every=1",
		"train.eval_batches=1", "ddp.check_every=1", "data.workers=1", "model.checkpoint=blocks")
	tr, err := New(context.Background(), cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("resume with other non-trajectory keys refused: %v", err)
	}
	defer tr.Close()
	if tr.st.Step != 2 {
		t.Fatalf("resumed at step %d, want 2", tr.st.Step)
	}
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.ParamSHA256 != straight.ParamSHA256 || res.Steps != 4 {
		t.Errorf("resumed run ends with %s after %d steps, uninterrupted %s after 4", res.ParamSHA256, res.Steps, straight.ParamSHA256)
	}
}

// A resume with a trajectory key changed is refused, and the refusal names each key with the
// checkpoint's value and this run's.
func TestResume_refusalNamesEachKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	mustRun(t, resumable(t, dir, "train.max_steps=2", "train.lr=0.003"), Options{})
	_, err := New(context.Background(), resumable(t, dir, "train.lr=0.001", "seed=7"), Options{Logger: quiet()})
	if err == nil {
		t.Fatal("a resume with train.lr and seed changed was accepted")
	}
	for _, want := range []string{"checkpoint.dir " + dir + " (step 2) was trained with seed=1, this run has seed=7",
		"with train.lr=0.003, this run has train.lr=0.001"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q\ndoes not say %q", err, want)
		}
	}
	// A changed world size shows as global_batch, with the hint.
	saved := &checkpoint.State{Step: 2, Trajectory: resumable(t, dir).Trajectory(), WorldSize: 2}
	cfg := resumable(t, dir)
	cfg.Train.GlobalBatch = 4
	saved.Trajectory["train.global_batch"] = "8"
	err = checkpoint.CheckTrajectory(saved, cfg, "checkpoint.dir "+dir, 1)
	if err == nil || !strings.Contains(err.Error(), "train.global_batch=8, this run has train.global_batch=4 (global_batch = micro_batch × grad_accum_steps × world size, and the world size was 2, now 1") {
		t.Errorf("world-size refusal: %v", err)
	}
}

// A checkpoint of the build before the trajectory config (state.json with a config hash, HashV1,
// and no trajectory) resumes when this config's HashV1 is the same, and is refused with a message
// saying why the key cannot be named when it is not.
func TestResume_earlierBuildCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	mustRun(t, resumable(t, dir, "train.max_steps=2"), Options{})
	// What the trainer hashes: its own copy of the config (batch resolved, data.path filled in).
	tr, err := New(context.Background(), resumable(t, filepath.Join(t.TempDir(), "other")), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	v1 := tr.cfg.HashV1()
	tr.Close()

	// Rewrite step 2 as that build wrote it.
	ck, err := checkpoint.Load(stepDir(dir, 2))
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	if err := json.Unmarshal(ck.State, &state); err != nil {
		t.Fatal(err)
	}
	delete(state, "trajectory")
	delete(state, "summary")
	state["config_hash"] = v1
	old := filepath.Join(t.TempDir(), "old")
	if _, err := checkpoint.Save(old, 2, ck.Weights, ck.Optim, state); err != nil {
		t.Fatal(err)
	}

	tr, err = New(context.Background(), resumable(t, old), Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("the earlier build's checkpoint of the same config was refused: %v", err)
	}
	if tr.st.Step != 2 {
		t.Errorf("resumed at step %d, want 2", tr.st.Step)
	}
	tr.Close()
	_, err = New(context.Background(), resumable(t, old, "checkpoint.keep=4"), Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "written by an earlier build") || !strings.Contains(err.Error(), "cannot say which") {
		t.Errorf("the earlier build's checkpoint with checkpoint.keep changed: %v, want a refusal saying the key cannot be named", err)
	}
}

// --resume-from takes a named step directory: resumed from step 2 into a fresh checkpoint.dir,
// the run ends bit-identical to the uninterrupted one. A checkpoint.dir holding newer checkpoints
// of another run is refused, except on a restart (the job's own progress, which is taken), and a
// checkpoint.dir given as --resume-from is refused naming a step directory.
func TestResumeFrom_namedCheckpoint(t *testing.T) {
	first := filepath.Join(t.TempDir(), "first")
	straight := mustRun(t, resumable(t, first), Options{})
	second := filepath.Join(t.TempDir(), "second")
	res := mustRun(t, resumable(t, second), Options{ResumeFrom: stepDir(first, 2)})
	if res.ParamSHA256 != straight.ParamSHA256 {
		t.Errorf("run from --resume-from step 2 ends with %s, the uninterrupted run %s", res.ParamSHA256, straight.ParamSHA256)
	}

	// second holds step 4 of another run (the one resumed from first's step 2 above).
	_, err := New(context.Background(), resumable(t, second), Options{Logger: quiet(), ResumeFrom: stepDir(first, 2)})
	if err == nil || !strings.Contains(err.Error(), "already holds step 4") {
		t.Errorf("--resume-from step 2 with step 4 in checkpoint.dir: %v, want a refusal naming step 4", err)
	}
	t.Setenv("DDP_RESTART_COUNT", "1")
	_, err = New(context.Background(), resumable(t, second), Options{Logger: quiet(), ResumeFrom: stepDir(first, 2)})
	var fin *FinishedError
	if !errors.As(err, &fin) || fin.Step != 4 {
		t.Errorf("a restart with --resume-from step 2 and step 4 (final) in checkpoint.dir: %v, want the run finished at step 4", err)
	}

	_, err = New(context.Background(), resumable(t, filepath.Join(t.TempDir(), "x")), Options{Logger: quiet(), ResumeFrom: first})
	if err == nil || !strings.Contains(err.Error(), "name one of its step directories") {
		t.Errorf("--resume-from a checkpoint.dir: %v", err)
	}
}

// Running a finished run again says so, with the summary of that run, and leaves its metrics file
// as it was.
func TestRun_finishedRunSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	mpath := filepath.Join(t.TempDir(), "m.jsonl")
	done := mustRun(t, resumable(t, dir), Options{MetricsPath: mpath})
	before, _ := os.ReadFile(mpath)
	_, err := Run(context.Background(), resumable(t, dir), Options{Logger: quiet(), MetricsPath: mpath})
	var fin *FinishedError
	if !errors.As(err, &fin) {
		t.Fatalf("Run of a finished run = %v, want a *FinishedError", err)
	}
	if fin.Step != 4 || fin.Summary == nil || fin.Summary.ParamSHA256 != done.ParamSHA256 {
		t.Errorf("FinishedError %+v, want step 4 and the run's summary (param_sha256 %s)", fin, done.ParamSHA256)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "run already finished at step 4: nothing to do") ||
		!strings.Contains(msg, "the summary of that run is: steps 4 ") || !strings.Contains(msg, done.ParamSHA256) {
		t.Errorf("message %q", msg)
	}
	if after, _ := os.ReadFile(mpath); string(after) != string(before) {
		t.Error("the finished run's metrics file was rewritten")
	}
	// A longer run (max_steps is not part of a constant schedule's trajectory) goes on.
	tr, err := New(context.Background(), resumable(t, dir, "train.max_steps=5"), Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("extending the finished run: %v", err)
	}
	tr.Close()
}

// ddptrain eval's core: the checkpoint's recorded config rebuilds the model, and the score is the
// one the run's own last evaluation gave.
func TestEvaluateCheckpoint_scoresLikeTheRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	res := mustRun(t, resumable(t, dir), Options{})
	cfg, err := ConfigFromCheckpoint(stepDir(dir, 4), []string{"train.eval_batches=2"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model.Layers != 2 || cfg.Model.Width != 64 || cfg.Train.MicroBatch != 4 || cfg.Train.Schedule != "constant" {
		t.Errorf("config from the checkpoint: %s", cfg.YAML())
	}
	r, err := EvaluateCheckpoint(context.Background(), dir, cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Step != 4 || r.Checkpoint != stepDir(dir, 4) || r.EvalAccuracy != nil || r.Samples != 8 || r.Seconds <= 0 {
		t.Errorf("report %+v, want step 4 of %s, 2 batches of 4 samples, no accuracy", r, stepDir(dir, 4))
	}
	if r.EvalLoss != res.EvalLoss {
		t.Errorf("eval loss %v, the run's last evaluation %v", r.EvalLoss, res.EvalLoss)
	}
	// Weights of another shape are refused by name.
	bad, _ := ConfigFromCheckpoint(stepDir(dir, 4), []string{"model.width=32"})
	if _, err := EvaluateCheckpoint(context.Background(), dir, bad, Options{Logger: quiet()}); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Errorf("a model of another width: %v", err)
	}
}
