package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goddp/goddp/worker"
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
	a, b := summary(t, m), summary(t, worker.RankPath(m, 1))
	if a.ParamSHA256 == "" || a.ParamSHA256 != b.ParamSHA256 {
		t.Fatalf("ranks end with %q and %q", a.ParamSHA256, b.ParamSHA256)
	}
	if a.Steps != 6 || a.WorldSize != 2 {
		t.Fatalf("summary %+v", a)
	}
}
