package launcher

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"
)

func (j *fakeJob) specs(n int, actions string, perRank map[int]string) []WorkerSpec {
	env := j.env(actions, perRank)
	specs := make([]WorkerSpec, n)
	for r := range specs {
		specs[r] = WorkerSpec{
			Rank: r, LocalRank: r, Path: j.self, Args: []string{"-test.run=^$"},
			Env: BuildEnv(env, WorkerEnv{Rank: r, LocalRank: r, WorldSize: n, LocalWorldSize: n}),
		}
	}
	return specs
}

// A worker that ignores SIGTERM is SIGKILLed after the grace period, with its grandchild.
func TestSupervise_graceThenSigkill(t *testing.T) {
	j := newFakeJob(t)
	specs := j.specs(2, "", map[int]string{0: "ignoreterm,pid,grandchild,ready,sleep:60s", 1: "pid,ready,sleep:60s"})
	type result struct {
		out *Outcome
		err error
	}
	c := make(chan result, 1)
	const grace = 1500 * time.Millisecond
	go func() {
		out, err := Supervise(context.Background(), specs, SuperviseConfig{Grace: grace, TailLines: 5})
		c <- result{out, err}
	}()
	j.waitFile("ready", 0, 0)
	j.waitFile("ready", 1, 0)
	pid, gc := j.pid("pid", 0, 0), j.pid("gc", 0, 0)
	// Make rank 1 fail: its own SIGKILL is a failure, and rank 0 must then be stopped.
	if err := syscall.Kill(j.pid("pid", 1, 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	var r result
	select {
	case r = <-c:
	case <-time.After(30 * time.Second):
		t.Fatal("Supervise did not return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	elapsed := time.Since(failed)
	if r.out.Failure == nil || r.out.Failure.Rank != 1 {
		t.Fatalf("failure %+v, want rank 1", r.out.Failure)
	}
	if !slices.Equal(r.out.Killed, []int{0}) || r.out.Exits[0].Status.Signal != syscall.SIGKILL {
		t.Errorf("killed %v, rank 0 %v: want rank 0 SIGKILLed after the grace", r.out.Killed, r.out.Exits[0].Status)
	}
	if elapsed < grace {
		t.Errorf("rank 0 killed after %v, before the %v grace", elapsed, grace)
	}
	assertGone(t, pid, "rank 0")
	assertGone(t, gc, "rank 0's grandchild")
}

// A worker that exits 0 leaves no grandchild behind, and its status is a success.
func TestSupervise_cleanExitKillsGroup(t *testing.T) {
	j := newFakeJob(t)
	out, err := Supervise(context.Background(), j.specs(1, "grandchild,echo:bye", nil), SuperviseConfig{TailLines: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Succeeded() || out.Exits[0].Status.Failed() || !slices.Equal(out.Exits[0].Tail, []string{"bye"}) {
		t.Errorf("outcome %+v", out)
	}
	assertGone(t, j.pid("gc", 0, 0), "grandchild")
}

// A worker killing itself by a signal is a failure reported with that signal.
func TestSupervise_deathBySignal(t *testing.T) {
	j := newFakeJob(t)
	out, err := Supervise(context.Background(), j.specs(1, "kill:15", nil), SuperviseConfig{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure == nil || out.Failure.Status.Signal != syscall.SIGTERM || out.Failure.Status.ExitCode() != 143 {
		t.Fatalf("failure %+v, want SIGTERM (143)", out.Failure)
	}
}

// Lost (the multi-host failure detector's channel) stops the workers.
func TestSupervise_lost(t *testing.T) {
	j := newFakeJob(t)
	lost := make(chan error, 1)
	c := make(chan *Outcome, 1)
	go func() {
		out, _ := Supervise(context.Background(), j.specs(2, "ready,sleep:60s", nil), SuperviseConfig{Grace: time.Second, Lost: lost})
		c <- out
	}()
	j.waitFile("ready", 0, 0)
	j.waitFile("ready", 1, 0)
	lost <- context.DeadlineExceeded
	select {
	case out := <-c:
		if out.Lost == nil || out.Failure != nil {
			t.Errorf("outcome %+v, want lost", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Supervise did not return")
	}
}
