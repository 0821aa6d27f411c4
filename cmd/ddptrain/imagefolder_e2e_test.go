package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker/observe"
)

// Issue 33: the whole image-folder path through the binaries. ddpbench images --from-mnist writes
// a few hundred MNIST digits as DIR/{train,val}/0..9/*.png, and configs/mnist-folder-resnet.yaml
// trains the ResNet from it for a few steps (PNGs decoded, cropped, flipped and normalised on
// the loader's workers), evaluates, and reports a finite loss. A corrupt image then fails the
// run with one line naming it.
func TestTrain_imageFolderFromMNIST(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "folder")
	bench := exec.Command(filepath.Join(binaries(t), "ddpbench"), "images", "--from-mnist", root, "--limit", "300", "--mnist", mnistDir(t))
	if out, err := bench.CombinedOutput(); err != nil {
		t.Fatalf("ddpbench images: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "train")); len(ents) != 10 {
		t.Fatalf("%s/train has %d class directories, want 10", root, len(ents))
	}
	m := filepath.Join(dir, "m.jsonl")
	args := []string{"--config", "../../configs/mnist-folder-resnet.yaml", "--set", "model.width=4", "--set", "train.max_steps=4",
		"--set", "train.global_batch=16", "--set", "train.eval_batches=2", "--set", "data.path=" + root, "--metrics", m}
	if out, err := runTrain(t, nil, args...); err != nil {
		t.Fatalf("ddptrain: %v\n%s", err, out)
	}
	s := summary(t, m)
	if s.Steps != 4 || !(s.EvalLoss > 0) || s.BuffersSHA256 == "" {
		t.Fatalf("summary %+v", s)
	}

	bad := filepath.Join(root, "train", "3", "zz-corrupt.png")
	if err := os.WriteFile(bad, []byte("\x89PNG but not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runTrain(t, nil, append(args, "--set", "data.shuffle=false", "--set", "train.max_steps=40")...)
	if err == nil || !strings.Contains(string(out), bad) {
		t.Fatalf("a corrupt image: %v, want an error naming %s\n%s", err, bad, out)
	}
}

// Issue 33: model.sync_batchnorm over world 2 through ddplaunch. The BatchNorm statistics are
// the whole global batch's on both ranks, the running statistics are not broadcast (each rank
// computes them, bit-identical by construction), so both ranks end with one buffers_sha256 as
// with one param_sha256 (the replica check every 2 steps).
func TestLaunch_syncBatchNormBuffersAgree(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.jsonl")
	args := []string{"--nproc-per-node", "2", "--grace", "3s", filepath.Join(binaries(t), "ddptrain"),
		"--config", "../../configs/mnist-resnet.yaml", "--set", "model.width=4", "--set", "train.max_steps=6",
		"--set", "model.sync_batchnorm=true",
		"--set", "train.global_batch=32", "--set", "train.log_every=2", "--set", "train.eval_batches=2",
		"--set", "ddp.check_every=2", "--set", "data.path=" + mnistDir(t), "--metrics", m}
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ddplaunch: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sync_batchnorm: BatchNorm statistics over every rank") {
		t.Fatalf("no sync_batchnorm line in the log:\n%s", out)
	}
	a, b := summary(t, m), summary(t, observe.RankPath(m, 1))
	if a.ParamSHA256 == "" || a.ParamSHA256 != b.ParamSHA256 {
		t.Fatalf("ranks end with parameters %q and %q", a.ParamSHA256, b.ParamSHA256)
	}
	if a.BuffersSHA256 == "" || a.BuffersSHA256 != b.BuffersSHA256 {
		t.Fatalf("ranks end with buffers %q and %q", a.BuffersSHA256, b.BuffersSHA256)
	}
	if a.Steps != 6 || a.WorldSize != 2 {
		t.Fatalf("summary %+v", a)
	}
}

// An image-folder run killed after a checkpoint and resumed ends as the uninterrupted one: the
// loader's position is in the checkpoint and every crop and flip is a function of (seed, epoch,
// sample), so the resumed run sees the same pixels.
func TestTrain_imageFolderResumeIsExact(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "folder")
	bench := exec.Command(filepath.Join(binaries(t), "ddpbench"), "images", "--from-mnist", root, "--limit", "200", "--mnist", mnistDir(t))
	if out, err := bench.CombinedOutput(); err != nil {
		t.Fatalf("ddpbench images: %v\n%s", err, out)
	}
	run := func(ck string) []string {
		return []string{"--config", "../../configs/mnist-folder-resnet.yaml", "--set", "model.width=4", "--set", "train.epochs=2", "--set", "train.max_steps=16",
			"--set", "train.global_batch=16", "--set", "train.eval_batches=2", "--set", "data.path=" + root,
			"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=5"}
	}
	straight := filepath.Join(dir, "straight.jsonl")
	if out, err := runTrain(t, nil, append(run(filepath.Join(dir, "ck-a")), "--metrics", straight)...); err != nil {
		t.Fatalf("straight run: %v\n%s", err, out)
	}
	ck := filepath.Join(dir, "ck-b")
	// Step 14 is in the second epoch (12 steps of 16 per epoch of 200 images).
	out, err := runTrain(t, []string{"DDP_FAIL_AT_STEP=14"}, append(run(ck), "--metrics", filepath.Join(dir, "broken.jsonl"))...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the failing run should exit 3, got %v\n%s", err, out)
	}
	resumed := filepath.Join(dir, "resumed.jsonl")
	if out, err = runTrain(t, []string{"DDP_RESTART_COUNT=1"}, append(run(ck), "--metrics", resumed)...); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	}
	a, b := summary(t, straight), summary(t, resumed)
	if a.ParamSHA256 != b.ParamSHA256 || a.BuffersSHA256 != b.BuffersSHA256 || a.EvalLoss != b.EvalLoss {
		t.Fatalf("resumed: %s %s eval loss %v; uninterrupted: %s %s eval loss %v", b.ParamSHA256, b.BuffersSHA256, b.EvalLoss, a.ParamSHA256, a.BuffersSHA256, a.EvalLoss)
	}
}
