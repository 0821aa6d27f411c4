package main

// Faults injected into real jobs (issue 30): the real ddplaunch and ddptrain, 2 workers. The
// times are logged for docs/launcher.md's fault table; the assertions are about what happened.

import (
	"bufio"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/launcher"
)

// The trainer's follow-on exit code is the one the launcher reads as such.
func TestExitFollowOn_isTheLaunchers(t *testing.T) {
	if exitFollowOn != launcher.ExitFollowOn || launcher.Trainer != "ddptrain" {
		t.Fatalf("ddptrain exits %d for a follow-on, the launcher reads %d from %q", exitFollowOn, launcher.ExitFollowOn, launcher.Trainer)
	}
	if exitMasterPort != launcher.ExitMasterPortTaken {
		t.Fatalf("ddptrain exits %d for a taken MASTER_PORT, the launcher reads %d", exitMasterPort, launcher.ExitMasterPortTaken)
	}
}

// runLaunch runs ddplaunch with 2 workers and the given trainer arguments; its output and how
// long it took.
func runLaunch(t *testing.T, args ...string) (string, time.Duration, error) {
	t.Helper()
	full := append([]string{"--nproc-per-node", "2", filepath.Join(binaries(t), "ddptrain"), "--config", "../../configs/mnist-mlp.yaml"}, args...)
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), full...)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(t0), err
}

var blamedRe = regexp.MustCompile(`ddplaunch: rank (\d+) \(local rank \d+, pid \d+\) failed`)

// Issue 30, item 5: data.path holding empty MNIST .gz files. Rank 0 fails reading them ("...:
// truncated header (want 16 bytes): EOF") and takes its rendezvous server down; rank 1's Join
// fails with "rendezvous ...: EOF", often first. Whenever rank 1 failed so, rank 0 is blamed:
// the trainer says by its exit code that rank 1's failure is a follow-on, whatever the words.
// (When rank 1 got as far as reading the files itself, both failures are their own, and the
// blamed rank is the one whose error came first; it is never one whose error is the rendezvous.)
func TestLaunch_emptyDataBlamesTheRankThatRead(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"} {
		fh, err := os.Create(filepath.Join(dir, f+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		gzip.NewWriter(fh).Close()
		fh.Close()
	}
	followOns := 0
	for i := range 10 {
		out, took, err := runLaunch(t, "--set", "train.max_steps=20", "--set", "data.path="+dir)
		if err == nil {
			t.Fatalf("run %d: ddplaunch exited 0 with empty data files", i)
		}
		m := blamedRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("run %d: no rank blamed:\n%s", i, out)
		}
		rank1Rdzv := strings.Contains(out, "[rank 1] ddptrain: worker: joining the process group")
		if rank1Rdzv {
			followOns++
		}
		if (rank1Rdzv && m[1] != "0") || !strings.Contains(out[strings.Index(out, m[0]):], "truncated header") {
			t.Fatalf("run %d: blamed rank %s, want the rank that read the empty files:\n%s", i, m[1], out)
		}
		t.Logf("run %d: rank %s blamed in %v", i, m[1], took.Round(time.Millisecond))
	}
	t.Logf("rank 1 failed as a follow-on (rendezvous) in %d of 10 runs", followOns)
	if followOns == 0 {
		t.Log("rank 1 never failed as a follow-on: this run did not exercise the case")
	}
}

// Issue 30, item 3: a rank that fails at once (model.init_from does not exist) while its peer
// is sending to it: the peer's abort frame to a dead rank, and every blocking call after it,
// take a context, so the job ends within the abort timeout and no worker outlives the grace
// period (the launcher would log "SIGKILLed workers that outlived the grace period").
func TestLaunch_failedRankEndsWithoutSIGKILL(t *testing.T) {
	var worst time.Duration
	for i := range 6 {
		out, took, err := runLaunch(t, "--set", "train.max_steps=20", "--set", "model.init_from=/nonexistent/ckpt", "--set", "data.path="+mnistDir(t))
		if err == nil {
			t.Fatalf("run %d: ddplaunch exited 0 with a missing init_from", i)
		}
		if strings.Contains(out, "SIGKILLed workers") {
			t.Fatalf("run %d: a worker outlived the grace period (%v):\n%s", i, took, out)
		}
		if m := blamedRe.FindStringSubmatch(out); m == nil {
			t.Fatalf("run %d: no rank blamed:\n%s", i, out)
		}
		worst = max(worst, took)
	}
	t.Logf("a failed rank ends the job in at most %v over 6 runs, without SIGKILL", worst.Round(time.Millisecond))
}

// Issue 30: a rank stopped (SIGSTOP) in a real job, at the launcher's default heartbeat limit
// (no --silence flag, DefaultSilence): the launcher finds it by its heartbeats, names it, and
// ends the job well before the collective timeout would. A worker that sends no heartbeat fails
// this test (its peer would time out on its own, later, and the launcher would name no silence).
func TestLaunch_stoppedRankFoundByHeartbeat(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--nproc-per-node", "2", "--grace", "3s", filepath.Join(binaries(t), "ddptrain")}
	args = append(args, smallRun(t, filepath.Join(dir, "ck"))...)
	args = append(args, "--set", "train.max_steps=100000", "--set", "ddp.timeout=60s")
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var lines []string
	victim := 0
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "[rank 0]") && strings.Contains(sc.Text(), "msg=train") {
			victim = workerPID(t, cmd.Process.Pid, "1")
			break
		}
	}
	if victim == 0 {
		t.Fatalf("never saw training start:\n%s", strings.Join(lines, "\n"))
	}
	syscall.Kill(victim, syscall.SIGSTOP)
	stopped := time.Now()
	done := make(chan struct{})
	go func() {
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		close(done)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-time.After(45 * time.Second):
		syscall.Kill(victim, syscall.SIGCONT)
		t.Fatalf("ddplaunch still running 45 s after rank 1 was stopped (collective timeout 60 s):\n%s", strings.Join(lines, "\n"))
	}
	took := time.Since(stopped)
	<-done
	all := strings.Join(lines, "\n")
	if err == nil {
		t.Fatal("ddplaunch exited 0 with a stopped rank")
	}
	if !strings.Contains(all, "rank 1 sent no heartbeat for") {
		t.Fatalf("the launcher did not name rank 1's silence:\n%s", all)
	}
	t.Logf("rank 1 SIGSTOPped: ddplaunch ended in %v, naming its silence (default limit %v)", took.Round(time.Millisecond), launcher.DefaultSilence)
}

// Issue 30, item 6: a config error names its key and is printed once under the launcher, not
// once per worker and again in the failure report: --set ddp.timeout=-5s (a valid Go duration,
// but negative), and a global batch that the world does not divide (which needs the world).
func TestLaunch_configErrorsNameTheKeyOnce(t *testing.T) {
	for _, c := range []struct{ set, say string }{
		{"ddp.timeout=-5s", "ddp.timeout: -5s: must be positive"},
		{"train.global_batch=7", "train.global_batch not divisible"},
	} {
		cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), "--nproc-per-node", "2", "--config", "../../configs/mnist-mlp.yaml", "--set", c.set)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("--set %s: %v, want exit 2 (a config error)", c.set, err)
		}
		if n := strings.Count(string(out), c.say); n != 1 {
			t.Errorf("--set %s: %q printed %d times, want once:\n%s", c.set, c.say, n, out)
		}
		if strings.Contains(string(out), "[rank ") {
			t.Errorf("--set %s: workers started:\n%s", c.set, out)
		}
	}
}

// Issue 30, item 4: rank 0's disk slow enough that a checkpoint's write outlasts the interval by
// more than the collective timeout (every write takes 4 s, checkpoints every 10 fast steps,
// ddp.timeout 3s; DDP_SLOW_CHECKPOINT, -tags ddptesthooks only). The job never dies of it: a
// checkpoint due while the previous one is still being written waits for it at most half the
// collective timeout, then is skipped, logged and counted; the run ends with its last
// checkpoint written.
func TestLaunch_slowCheckpointDoesNotKillTheJob(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	args := []string{"--nproc-per-node", "2", "--grace", "3s", filepath.Join(binaries(t), "ddptrain")}
	args = append(args, smallRun(t, ck)...)
	args = append(args, "--set", "ddp.timeout=3s", "--set", "train.max_steps=40")
	cmd := exec.Command(filepath.Join(binaries(t), "ddplaunch"), args...)
	cmd.Env = append(os.Environ(), "DDP_SLOW_CHECKPOINT=4s")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("the job died of a slow checkpoint after %v: %v\n%s", took, err, out)
	}
	skipped := strings.Count(string(out), "checkpoint skipped")
	if skipped == 0 {
		t.Fatalf("no checkpoint skipped with 4 s writes every 10 steps:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(ck, "step-00000040")); err != nil {
		t.Errorf("the last step's checkpoint was not written: %v", err)
	}
	t.Logf("4 s per checkpoint write, every 10 steps, ddp.timeout 3s: the job finished in %v, %d checkpoints skipped", took.Round(time.Millisecond), skipped)
}

// Issue 30, item 6, the worker-side half: data.path missing on the host fails every rank with
// the same line. It is shown once on the console and once in the failure report (the root's
// tail), never once per rank; a rank that failed with it too is named "with the same error".
func TestLaunch_sameWorkerErrorPrintedOnce(t *testing.T) {
	const say = "not found in /nonexistent"
	for range 3 {
		out, _, err := runLaunch(t, "--set", "train.max_steps=5", "--set", "data.path=/nonexistent")
		if err == nil {
			t.Fatalf("a job with data.path=/nonexistent succeeded:\n%s", out)
		}
		if n := strings.Count(out, say); n != 2 {
			t.Fatalf("%q printed %d times, want 2 (the console, the report's tail):\n%s", say, n, out)
		}
	}
}
