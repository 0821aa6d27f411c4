package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/observe"
)

// Issue 21: a ResNet with batch norm under DDP, world 2 on the CPU. Each rank normalises with its
// own micro-batch's statistics (no SyncBatchNorm), the gradients are all-reduced, and the running
// statistics are rank 0's (broadcast at the start and after every step), so the replicas stay
// bit-identical: the replica check runs every 2 steps and both ranks end with one param_sha256.
// The replica check covers the running statistics too (ddp.Engine.SetBuffers): without the
// per-step broadcast it fails at step 2, naming the buffers (issue 30).
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

// A ResNet checkpoint stands alone: its config.json is the whole architecture (depth, stem,
// image, ...), so model.Open builds the trained network from the directory alone, weights and
// BatchNorm running statistics loaded, and its parameters hash as the run's did at its end.
func TestTrain_resnetCheckpointOpensAlone(t *testing.T) {
	dir := t.TempDir()
	ck, m := filepath.Join(dir, "ck"), filepath.Join(dir, "m.jsonl")
	if out, err := runTrain(t, nil, "--config", "../../configs/mnist-resnet.yaml", "--set", "model.width=4", "--set", "train.max_steps=3",
		"--set", "train.global_batch=16", "--set", "train.eval_batches=1", "--set", "data.path="+mnistDir(t),
		"--set", "checkpoint.dir="+ck, "--metrics", m); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	last, err := checkpoint.Latest(ck)
	if err != nil || last == "" {
		t.Fatalf("no checkpoint in %s: %v", ck, err)
	}
	net, spec, err := model.Open(cpu.New(), last)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Free()
	if spec.Kind != model.SpecKindResNet || spec.Depth != 18 || spec.Stem != "small" || spec.Width != 4 || spec.Classes != 10 ||
		fmt.Sprint(spec.Image) != "[1 28 28]" {
		t.Errorf("config.json: %+v", spec)
	}
	if got, want := net.Params().SHA256(), summary(t, m).ParamSHA256; got != want {
		t.Errorf("opened parameters hash %s, the run ended with %s", got, want)
	}
	first := net.(model.Buffered).Buffers().List[0] // the stem's BN running mean or variance
	moved := false
	for _, v := range tensor.ToHost(first.T) {
		moved = moved || v != first.Init
	}
	if !moved {
		t.Errorf("%s is still its initial %v: the running statistics were not loaded", first.Name, first.Init)
	}
}
