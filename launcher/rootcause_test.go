package launcher

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// ex builds a started worker's exit: rank, status, exit and first-error times in ms after t0,
// its first error line, and whether the launcher had stopped it.
func ex(rank int, st ExitStatus, exitMs, errMs int, line string, stopped bool) WorkerExit {
	t0 := time.Unix(1000, 0)
	e := WorkerExit{Rank: rank, LocalRank: rank, Started: true, Status: st, Exited: t0.Add(time.Duration(exitMs) * time.Millisecond), Stopped: stopped}
	if errMs >= 0 {
		e.ErrorAt, e.ErrorLine = t0.Add(time.Duration(errMs)*time.Millisecond), line
		e.Tail = []string{line}
	}
	return e
}

var (
	exit1   = ExitStatus{Code: 1}
	byTerm  = ExitStatus{Code: -1, Signal: syscall.SIGTERM}
	byKill  = ExitStatus{Code: -1, Signal: syscall.SIGKILL}
	rdzvEOF = "ddptrain: worker: joining the process group: allreduce: rank 1: rendezvous at 127.0.0.1:46831 (MASTER_ADDR:MASTER_PORT): rpc error: code = Unavailable desc = error reading from server: EOF"
	noData  = "ddptrain: data: MNIST file train-images-idx3-ubyte(.gz) not found in /nonexistent"
	// issue 30: rank 0's own failure, which says EOF.
	emptyData = "ddptrain: data: MNIST train-images-idx3-ubyte.gz: truncated header (want 16 bytes): EOF"
)

// trainer marks e as goddp's trainer's exit.
func trainer(e WorkerExit) WorkerExit { e.Program = Trainer; return e }

func ranks(es []WorkerExit) []int {
	var r []int
	for _, e := range es {
		r = append(r, e.Rank)
	}
	return r
}

func TestBlame(t *testing.T) {
	tests := []struct {
		name  string
		exits []WorkerExit
		want  []int // candidates, root first
	}{
		{"issue 22: bad data.path, rank 1's follow-on exits first and rank 0 prints last",
			[]WorkerExit{ex(0, exit1, 40, 35, noData, true), ex(1, exit1, 0, 0, rdzvEOF, false)}, []int{0, 1}},
		{"the same with the follow-on's line first: own failures still win",
			[]WorkerExit{ex(0, exit1, 40, 38, noData, true), ex(1, exit1, 10, 0, rdzvEOF, false)}, []int{0, 1}},
		{"two own failures: the one whose error came first, though it exited last",
			[]WorkerExit{ex(0, ExitStatus{Code: 3}, 250, 200, "error: out of memory", false), ex(1, ExitStatus{Code: 2}, 800, 0, "error: disk on fire", true)}, []int{1, 0}},
		{"no error line: exit order",
			[]WorkerExit{ex(0, exit1, 30, -1, "", true), ex(1, ExitStatus{Code: 4}, 10, -1, "", false)}, []int{1, 0}},
		{"killed by the launcher's stop (SIGTERM, SIGKILL after the grace, 143) is not a cause",
			[]WorkerExit{ex(0, byTerm, 20, -1, "", true), ex(1, ExitStatus{Code: 9}, 0, 0, "error: x", false), ex(2, byKill, 5000, -1, "", true), ex(3, ExitStatus{Code: 143}, 30, -1, "", true)}, []int{1}},
		{"a SIGKILL the launcher did not send (the OOM killer) is a failure of its own",
			[]WorkerExit{ex(0, byKill, 50, -1, "", false), ex(1, exit1, 0, 0, "ddptrain: worker: step 7: allreduce: rank 0: connection closed by peer", false)}, []int{0, 1}},
		{"a failure that begins past the window is a consequence, not a candidate",
			[]WorkerExit{ex(0, exit1, 0, 0, "error: first", false), ex(1, exit1, 2600, 2500, "error: later", true)}, []int{0}},
		{"only follow-ons: the earliest",
			[]WorkerExit{ex(0, exit1, 30, 20, "ddptrain: context canceled", true), ex(1, exit1, 10, 5, rdzvEOF, false)}, []int{1, 0}},
		{"ties: the lower rank",
			[]WorkerExit{ex(1, exit1, 10, 5, "error: a", false), ex(0, exit1, 10, 5, "error: b", false)}, []int{0, 1}},
		{"workers that never started or exited 0 are not candidates",
			[]WorkerExit{{Rank: 0}, ex(1, ExitStatus{}, 0, -1, "", false), ex(2, exit1, 5, -1, "", false)}, []int{2}},
		{"nothing failed", []WorkerExit{ex(0, ExitStatus{}, 0, -1, "", false)}, nil},
		{"issue 30: empty data files; rank 0's own error ends in EOF, rank 1's follow-on exits first",
			[]WorkerExit{trainer(ex(0, exit1, 40, 35, emptyData, true)), trainer(ex(1, ExitStatus{Code: ExitFollowOn}, 0, 0, rdzvEOF, false))}, []int{0, 1}},
		{"the trainer's kind is its exit code, not its words",
			[]WorkerExit{trainer(ex(0, ExitStatus{Code: ExitFollowOn}, 0, 0, "ddptrain: worker: disk on fire", false)), trainer(ex(1, exit1, 40, 35, rdzvEOF, true))}, []int{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ranks(Blame(tt.exits, DefaultRootCauseWindow)); !slices.Equal(got, tt.want) {
				t.Errorf("Blame: ranks %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIsErrorLine(t *testing.T) {
	for _, tt := range []struct {
		line string
		want bool
	}{
		{noData, true}, // "PROGRAM: message"
		{"ddptrainer is warming up", false},
		{`time=2026-12-04T02:14:48Z level=ERROR msg="failing on purpose"`, true},
		{`{"time":"x","level":"ERROR","msg":"boom"}`, true},
		{`time=2026-12-04T02:14:48Z level=INFO msg=train step=20 errors=0`, false},
		{"panic: runtime error: index out of range", true},
		{"fatal error: all goroutines are asleep - deadlock!", true},
		{"Traceback (most recent call last):", true},
		{"Error: no such file", true},
		{"ERROR:root:bad config", true},
		{"errors so far: none", false},
		{"[rank 0]   ddp          wire f32", false},
	} {
		if got := IsErrorLine([]byte(tt.line), "ddptrain"); got != tt.want {
			t.Errorf("IsErrorLine(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}

func TestIsFollowOn(t *testing.T) {
	for _, tt := range []struct {
		line string
		want bool
	}{
		{rdzvEOF, true},
		{"ddptrain: worker: joining the process group: allreduce: rank 1: rendezvous at 127.0.0.1:36975 (MASTER_ADDR:MASTER_PORT): rpc error: code = Canceled desc = context canceled", true},
		{"ddptrain: worker: step 12: allreduce: rank 2: connection closed by peer: EOF", true},
		{"ddptrain: context canceled", true},
		{"ConnectionResetError: [Errno 104] Connection reset by peer", true},
		{noData, false},
		{"ddptrain: worker: step 3: loss is NaN", false},
		{"error: EOFError-free file", false},
		{emptyData, false},
	} {
		e := WorkerExit{ErrorLine: tt.line}
		if got := IsFollowOn(e); got != tt.want {
			t.Errorf("IsFollowOn(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
	// The last output line counts too (where a Python exception ends).
	e := WorkerExit{ErrorLine: "Traceback (most recent call last):", Tail: []string{"  File x", "BrokenPipeError: [Errno 32] Broken pipe"}}
	if !IsFollowOn(e) {
		t.Error("a traceback ending in a broken pipe is not a follow-on")
	}
	// goddp's trainer: by its exit code alone.
	for _, tt := range []struct {
		st   ExitStatus
		line string
		want bool
	}{
		{ExitStatus{Code: ExitFollowOn}, "ddptrain: worker: anything", true},
		{exit1, rdzvEOF, false},
		{ExitStatus{Code: -1, Signal: syscall.SIGKILL}, rdzvEOF, false},
	} {
		if got := IsFollowOn(trainer(WorkerExit{Status: tt.st, ErrorLine: tt.line, Tail: []string{tt.line}})); got != tt.want {
			t.Errorf("ddptrain exiting %v with %q: IsFollowOn %v, want %v", tt.st, tt.line, got, tt.want)
		}
	}
}
