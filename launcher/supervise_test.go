package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// superviseAsync runs Supervise in a goroutine.
func superviseAsync(specs []WorkerSpec, cfg SuperviseConfig) <-chan superviseResult {
	c := make(chan superviseResult, 1)
	go func() {
		out, err := Supervise(context.Background(), specs, cfg)
		c <- superviseResult{out, err}
	}()
	return c
}

type superviseResult struct {
	out *Outcome
	err error
}

func waitSupervise(t *testing.T, c <-chan superviseResult, within time.Duration) superviseResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(within):
		t.Fatalf("Supervise did not return within %v", within)
		return superviseResult{}
	}
}

// A signal while the workers are being started stops the starting at once: the workers not yet
// started never are, the ones started get the signal and are reaped.
func TestSupervise_signalWhileStarting(t *testing.T) {
	j := newFakeJob(t)
	const n, at = 40, 5
	specs := j.specs(n, "pid,sleep:60s", nil)
	sigs := make(chan os.Signal, 1)
	cfg := SuperviseConfig{Grace: 2 * time.Second, Signals: sigs, beforeStart: func(i int, s *supervisor) {
		if i == at {
			sigs <- syscall.SIGTERM
		}
	}}
	r := waitSupervise(t, superviseAsync(specs, cfg), 30*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.out.Signal != syscall.SIGTERM {
		t.Errorf("outcome signal %v, want SIGTERM", r.out.Signal)
	}
	for i, e := range r.out.Exits {
		if e.Started != (i < at) {
			t.Errorf("worker %d started=%v, want %v (the signal came before worker %d)", i, e.Started, i < at, at)
		}
		if e.Started && e.Status.Signal != syscall.SIGTERM && e.Status.Signal != syscall.SIGKILL {
			t.Errorf("worker %d ended %v, want the forwarded SIGTERM", i, e.Status)
		}
		if _, err := os.Stat(j.path("pid", i, 0)); i >= at && err == nil {
			t.Errorf("worker %d ran", i)
		}
	}
}

// A worker that fails while the others are being started stops the starting: the root failure is
// reported and nothing more is started.
func TestSupervise_failureWhileStarting(t *testing.T) {
	j := newFakeJob(t)
	const n = 20
	specs := j.specs(n, "sleep:60s", map[int]string{0: "echoerr:error: bad input,exit:5"})
	cfg := SuperviseConfig{Grace: 2 * time.Second, beforeStart: func(i int, s *supervisor) {
		if i != 2 {
			return
		}
		// Let rank 0's exit reach the supervisor before worker 2 would start.
		for end := time.Now().Add(20 * time.Second); len(s.events) == 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}}
	r := waitSupervise(t, superviseAsync(specs, cfg), 40*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if f := r.out.Failure; f == nil || f.Rank != 0 || f.Status.Code != 5 || f.ErrorLine != "error: bad input" {
		t.Fatalf("failure %+v, want rank 0 exit 5 with its error line", f)
	}
	started := 0
	for _, e := range r.out.Exits {
		if e.Started {
			started++
		}
	}
	if started != 2 {
		t.Errorf("%d workers started, want 2 (starting stops at rank 0's failure)", started)
	}
}

// A worker that cannot be started stops the starting; the ones started are SIGKILLed and reaped,
// and the error says what a shell would (127: not found).
func TestSupervise_startFailureKillsStarted(t *testing.T) {
	j := newFakeJob(t)
	specs := j.specs(5, "pid,grandchild,ready,sleep:60s", nil)
	specs[3].Path = filepath.Join(j.dir, "no-such-program")
	cfg := SuperviseConfig{Grace: 10 * time.Second, beforeStart: func(i int, s *supervisor) {
		if i == 3 {
			for r := range 3 {
				j.waitFile("ready", r, 0)
			}
		}
	}}
	start := time.Now()
	r := waitSupervise(t, superviseAsync(specs, cfg), 30*time.Second)
	var se *StartError
	if !errors.As(r.err, &se) || se.Rank != 3 || ExitCode(r.err) != ExitNotFound {
		t.Fatalf("Supervise: %v, want a StartError for rank 3 with exit code 127", r.err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("took %v: the started workers must be SIGKILLed, not given the 10s grace", took)
	}
	for rank := range 3 {
		assertGone(t, j.pid("pid", rank, 0), fmt.Sprintf("rank %d", rank))
		assertGone(t, j.pid("gc", rank, 0), fmt.Sprintf("rank %d's grandchild", rank))
	}
	if _, err := os.Stat(j.path("ready", 4, 0)); err == nil {
		t.Error("rank 4 started after rank 3 could not")
	}
	// Not executable: 126.
	noExec := filepath.Join(j.dir, "not-executable")
	os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644)
	_, err := Supervise(context.Background(), []WorkerSpec{{Path: noExec}}, SuperviseConfig{})
	if ExitCode(err) != ExitNoExec {
		t.Errorf("a non-executable program: %v, exit code %d, want 126", err, ExitCode(err))
	}
}

// A worker that heartbeats and then stops (SIGSTOP) is found silent within Silence, SIGKILLed and
// named as the root failure with why — not the healthy rank, whose collective would time out
// later — and the job ends within seconds; a worker that never heartbeats is never judged.
func TestSupervise_silentWorkerIsTheRoot(t *testing.T) {
	j := newFakeJob(t)
	specs := j.specs(3, "", map[int]string{
		0: "beat,sleep:60s",                 // healthy, waiting (as in a collective)
		1: "beat,ready,sleep:300ms,kill:19", // stops itself: SIGSTOP
		2: "sleep:60s",                      // never beats (not goddp's trainer)
	})
	start := time.Now()
	out, err := Supervise(context.Background(), specs, SuperviseConfig{Grace: time.Second, Silence: time.Second, TailLines: 5})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if out.Failure == nil || out.Failure.Rank != 1 {
		t.Fatalf("failure %+v, want rank 1 (the stopped one)", out.Failure)
	}
	if !strings.Contains(out.Failure.ErrorLine, "no heartbeat") || !strings.Contains(out.Failure.ErrorLine, "rank 1") {
		t.Errorf("root failure line %q does not say rank 1 went silent", out.Failure.ErrorLine)
	}
	if took > 8*time.Second {
		t.Errorf("the job took %s to end after a rank stopped; want a few seconds", took)
	}
}
