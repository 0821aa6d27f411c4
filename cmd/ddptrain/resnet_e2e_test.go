package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goddp/goddp/worker/observe"
)

// Issue 21: a ResNet with batch norm under DDP, world 2 on the CPU. Each rank normalises with its
// own micro-batch's statistics (no SyncBatchNorm), the gradients are all-reduced, and the running
// statistics are rank 0's (broadcast at the start and after every step), so the replicas stay
// bit-identical: the replica check runs every 2 steps and both ranks end with one param_sha256.
func TestLaunch_resnetBatchNormReplicasAgree(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.jsonl")
	args := []string{"--nproc-per-node", "2", "--grace", "3s", filepath.Join(binaries(t), "ddptrain"),
		"--config", "../../configs/mnist-resnet.yaml", "--set", "model.width=4", "--set", "train.max_steps=6",
		"--set", "train.global_batch=32", "--set", "train.log_every=2", "--set", "train.eval_batches=2",
		"--set", "ddp.check_every=2", "--set", "data.path=" + mnistDir(t), "--metrics", m}
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ddplaunch: %v\n%s", err, out)
	}
	a, b := summary(t, m), summary(t, observe.RankPath(m, 1))
	if a.ParamSHA256 == "" || a.ParamSHA256 != b.ParamSHA256 {
		t.Fatalf("ranks end with %q and %q", a.ParamSHA256, b.ParamSHA256)
	}
	if a.Steps != 6 || a.WorldSize != 2 {
		t.Fatalf("summary %+v", a)
	}
}

// A ResNet run killed after a checkpoint and resumed ends as the uninterrupted one: the same
// param_sha256 and, since evaluation normalises with the BN running statistics (buffers saved
// in the checkpoint beside the weights), the same eval loss to the last digit.
func TestTrain_resnetResumeIsExact(t *testing.T) {
	dir := t.TempDir()
	run := func(ck string) []string {
		return []string{"--config", "../../configs/mnist-resnet.yaml", "--set", "model.width=4", "--set", "train.max_steps=12",
			"--set", "train.global_batch=32", "--set", "train.log_every=4", "--set", "train.eval_batches=4",
			"--set", "data.path=" + mnistDir(t), "--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=5"}
	}
	straight := filepath.Join(dir, "straight.jsonl")
	if out, err := runTrain(t, nil, append(run(filepath.Join(dir, "ck-a")), "--metrics", straight)...); err != nil {
		t.Fatalf("straight run: %v\n%s", err, out)
	}
	ck := filepath.Join(dir, "ck-b")
	out, err := runTrain(t, []string{"DDP_FAIL_AT_STEP=8"}, append(run(ck), "--metrics", filepath.Join(dir, "broken.jsonl"))...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the failing run should exit 3, got %v\n%s", err, out)
	}
	resumed := filepath.Join(dir, "resumed.jsonl")
	if out, err = runTrain(t, []string{"DDP_RESTART_COUNT=1"}, append(run(ck), "--metrics", resumed)...); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	}
	a, b := summary(t, straight), summary(t, resumed)
	if a.ParamSHA256 != b.ParamSHA256 || a.EvalLoss != b.EvalLoss {
		t.Fatalf("resumed: %s eval loss %v; uninterrupted: %s eval loss %v", b.ParamSHA256, b.EvalLoss, a.ParamSHA256, a.EvalLoss)
	}
}
