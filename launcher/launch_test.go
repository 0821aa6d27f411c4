package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runAsync runs Run in a goroutine; the returned channel delivers its error.
func runAsync(o Options) <-chan error {
	c := make(chan error, 1)
	go func() { c <- Run(context.Background(), o) }()
	return c
}

func waitRun(t *testing.T, c <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(within):
		t.Fatalf("Run did not return within %v", within)
		return nil
	}
}

// envOf collects the "env K=V" lines each rank printed: rank → K → V.
func envOf(lines []string) map[int]map[string]string {
	re := regexp.MustCompile(`^\[rank (\d+)\] env ([A-Z_]+)=(.*)$`)
	out := map[int]map[string]string{}
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var r int
		fmt.Sscan(m[1], &r)
		if out[r] == nil {
			out[r] = map[string]string{}
		}
		out[r][m[2]] = m[3]
	}
	return out
}

func TestRun_env(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(3, "env", nil)
	o.Env = append(o.Env, "CUDA_VISIBLE_DEVICES=4,5", "DDP_PROGRESS_FD=9", "RANK=77")
	if err := Run(context.Background(), o); err != nil {
		t.Fatalf("Run: %v\n%s", err, j.stderr)
	}
	envs := envOf(j.stdout.lines())
	if len(envs) != 3 {
		t.Fatalf("env of %d ranks, want 3:\n%s", len(envs), j.stdout)
	}
	tok, port := envs[0]["DDP_TOKEN"], envs[0]["MASTER_PORT"]
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Errorf("DDP_TOKEN %q: want 64 hex digits", tok)
	}
	if port == "" || port == "0" {
		t.Errorf("MASTER_PORT %q: want a free port", port)
	}
	for r := 0; r < 3; r++ {
		want := map[string]string{
			"RANK": fmt.Sprint(r), "LOCAL_RANK": fmt.Sprint(r), "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3",
			"NODE_RANK": "0", "GROUP_RANK": "0", "NNODES": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
			"DDP_TOKEN": tok, "DDP_RESTART_COUNT": "0", "DDP_MAX_RESTARTS": "0", "CUDA_VISIBLE_DEVICES": "4,5",
		}
		got := envs[r]
		for k, v := range want {
			if got[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got[k], v)
			}
		}
		if v, ok := got["DDP_PROGRESS_FD"]; ok {
			t.Errorf("rank %d: DDP_PROGRESS_FD=%q without a progress terminal", r, v)
		}
	}
	// A second job gets a fresh token.
	j2 := newFakeJob(t)
	if err := Run(context.Background(), j2.options(1, "env", nil)); err != nil {
		t.Fatal(err)
	}
	if tok2 := envOf(j2.stdout.lines())[0]["DDP_TOKEN"]; tok2 == tok {
		t.Errorf("two jobs share the token %q", tok)
	}
}

func TestRun_masterAddrPort(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "env", nil)
	o.MasterAddr, o.MasterPort = "localhost", 29555
	o.VisibleGPUs = 1 // two workers, one GPU: the launcher says so at start
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.stderr.String(), "2 workers share GPU 0 (local ranks 0,1)") {
		t.Errorf("no GPU sharing notice:\n%s", j.stderr)
	}
	for r, e := range envOf(j.stdout.lines()) {
		if e["MASTER_ADDR"] != "localhost" || e["MASTER_PORT"] != "29555" {
			t.Errorf("rank %d: master %s:%s", r, e["MASTER_ADDR"], e["MASTER_PORT"])
		}
	}
}

// Rank 0 alone gets the progress terminal as fd 3.
func TestRun_progressFD(t *testing.T) {
	j := newFakeJob(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	o := j.options(2, "env,progress", nil)
	o.Progress = pw
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got, _ := readAll(pr)
	if got != "progress from rank 0\n" {
		t.Errorf("progress fd got %q, want rank 0's line only", got)
	}
	envs := envOf(j.stdout.lines())
	if envs[0]["DDP_PROGRESS_FD"] != "3" {
		t.Errorf("rank 0 DDP_PROGRESS_FD=%q, want 3", envs[0]["DDP_PROGRESS_FD"])
	}
	if _, ok := envs[1]["DDP_PROGRESS_FD"]; ok {
		t.Errorf("rank 1 has DDP_PROGRESS_FD")
	}
}

func readAll(f *os.File) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}

func TestRun_prefixAndLogDir(t *testing.T) {
	j := newFakeJob(t)
	logDir := j.dir + "/logs"
	o := j.options(2, "echo:hello world,echoerr:to stderr,noeol:no newline", nil)
	o.LogDir = logDir
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		p := fmt.Sprintf("[rank %d] ", r)
		if !slices.Contains(j.stdout.lines(), p+"hello world") || !slices.Contains(j.stdout.lines(), p+"no newline") {
			t.Errorf("stdout lacks rank %d's lines:\n%s", r, j.stdout)
		}
		if !slices.Contains(j.stderr.lines(), p+"to stderr") {
			t.Errorf("stderr lacks rank %d's line:\n%s", r, j.stderr)
		}
		if strings.Contains(j.stdout.String(), p+"to stderr") {
			t.Errorf("stderr line of rank %d on stdout", r)
		}
		b, err := os.ReadFile(RankLogPath(logDir, r))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "=== ddplaunch: rank") ||
			!slices.Contains(lines, "hello world") || !slices.Contains(lines, "to stderr") || !slices.Contains(lines, "no newline") {
			t.Errorf("rank-%d.log:\n%s", r, b)
		}
	}
}

// A failing worker's exit status becomes the launcher's, and the report shows its last lines.
func TestRun_exitStatusAndTail(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "sleep:30s", map[int]string{1: "lines:15,exit:7"})
	start := time.Now()
	err := waitRun(t, runAsync(o), 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Status.Code != 7 || ExitCode(err) != 7 {
		t.Fatalf("Run: %v (%#v), want rank 1 exit status 7", err, we)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("took %v: rank 0 should have been stopped by SIGTERM", time.Since(start))
	}
	report := j.stderr.String()
	if !strings.Contains(report, "rank 1 (local rank 1, pid ") || !strings.Contains(report, "failed: exit status 7") {
		t.Errorf("report does not name rank 1 and its status:\n%s", report)
	}
	if !strings.Contains(report, "last 10 lines of rank 1") || !strings.Contains(report, "    line 5\n") ||
		!strings.Contains(report, "    line 14\n") || strings.Contains(report, "    line 4\n") {
		t.Errorf("report lacks the last 10 lines:\n%s", report)
	}
}

// The test: SIGKILL of one worker mid-run ends the job within 15 s, naming that rank, with
// no worker nor grandchild left.
func TestRun_sigkillOneWorker(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(3, "pid,grandchild,ready,sleep:60s", nil)
	c := runAsync(o)
	var pids []int
	for r := 0; r < 3; r++ {
		j.waitFile("ready", r, 0)
		pids = append(pids, j.pid("pid", r, 0), j.pid("gc", r, 0))
	}
	victim := j.pid("pid", 1, 0)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err := waitRun(t, c, 15*time.Second)
	t.Logf("Run returned %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Status.Signal != syscall.SIGKILL || ExitCode(err) != 137 {
		t.Fatalf("Run: %v, want rank 1 killed by SIGKILL, exit code 137", err)
	}
	if !strings.Contains(j.stderr.String(), "rank 1 (local rank 1, pid "+fmt.Sprint(victim)+") failed: killed by signal 9") {
		t.Errorf("report does not name rank 1:\n%s", j.stderr)
	}
	for i, pid := range pids {
		assertGone(t, pid, []string{"worker", "grandchild"}[i%2]+" of rank "+fmt.Sprint(i/2))
	}
}

// --max-restarts 1: rank 1 fails on the first attempt only; the job restarts every worker with
// DDP_RESTART_COUNT=1 and a new port, and succeeds.
func TestRun_maxRestartsRecovers(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "pid,env,ready,sleep:300ms", map[int]string{1: "await:ready-0,pid,env,failfirst:3"})
	o.MaxRestarts = 1
	err := waitRun(t, runAsync(o), 60*time.Second)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, j.stderr)
	}
	for r := 0; r < 2; r++ {
		for restart := 0; restart < 2; restart++ {
			if _, err := os.Stat(j.path("pid", r, restart)); err != nil {
				t.Errorf("rank %d did not run in attempt %d", r, restart)
			}
		}
	}
	if !strings.Contains(j.stderr.String(), "restarting all 2 workers (restart 1 of 1)") ||
		!strings.Contains(j.stderr.String(), "failed: exit status 3") {
		t.Errorf("restart not logged:\n%s", j.stderr)
	}
	// Two attempts' env: restart counts 0 and 1, different ports.
	counts, ports := map[string]bool{}, map[string]bool{}
	for _, l := range j.stdout.lines() {
		if v, ok := strings.CutPrefix(l, "[rank 0] env DDP_RESTART_COUNT="); ok {
			counts[v] = true
		}
		if v, ok := strings.CutPrefix(l, "[rank 0] env MASTER_PORT="); ok {
			ports[v] = true
		}
		if strings.HasPrefix(l, "[rank 0] env DDP_MAX_RESTARTS=") && l != "[rank 0] env DDP_MAX_RESTARTS=1" {
			t.Errorf("got %q", l)
		}
	}
	if !counts["0"] || !counts["1"] || len(ports) != 2 {
		t.Errorf("restart counts %v, ports %v: want 0 and 1, two ports", counts, ports)
	}
}

func TestRun_restartsExhausted(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "pid,exit:0", map[int]string{0: "pid,exit:4"})
	o.MaxRestarts = 1
	err := waitRun(t, runAsync(o), 60*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || ExitCode(err) != 4 || we.Restarts != 1 {
		t.Fatalf("Run: %v, want rank 0 exit status 4 after 1 restart", err)
	}
	if _, err := os.Stat(j.path("pid", 0, 2)); err == nil {
		t.Errorf("a third attempt ran")
	}
	if !strings.Contains(j.stderr.String(), "no restart left") {
		t.Errorf("stderr:\n%s", j.stderr)
	}
}

// SIGTERM and SIGINT to the launcher reach every worker, and never restart the job.
func TestRun_signalForwarded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			j := newFakeJob(t)
			sigs := make(chan os.Signal, 1)
			o := j.options(2, "trapterm,ready,sleep:60s", nil)
			o.Signals = sigs
			o.MaxRestarts = 3
			c := runAsync(o)
			j.waitFile("ready", 0, 0)
			j.waitFile("ready", 1, 0)
			sigs <- sig
			err := waitRun(t, c, 20*time.Second)
			var se *SignalError
			if !errors.As(err, &se) || ExitCode(err) != 128+int(sig) {
				t.Fatalf("Run: %v, want stopped by %v", err, sig)
			}
			for r := 0; r < 2; r++ {
				if got := j.waitFile("term", r, 0); got != sig.String() {
					t.Errorf("rank %d got %q, want %q", r, got, sig.String())
				}
			}
			if _, err := os.Stat(j.path("ready", 0, 1)); err == nil {
				t.Errorf("the job restarted after a signal to the launcher")
			}
		})
	}
}

func TestRun_contextCancel(t *testing.T) {
	j := newFakeJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan error, 1)
	go func() { c <- Run(ctx, j.options(1, "pid,ready,sleep:60s", nil)) }()
	j.waitFile("ready", 0, 0)
	pid := j.pid("pid", 0, 0)
	cancel()
	if err := waitRun(t, c, 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	assertGone(t, pid, "worker")
}

func TestRun_badOptions(t *testing.T) {
	for _, o := range []Options{
		{NProcPerNode: 0, Program: "x"},
		{NProcPerNode: 1},
		{NProcPerNode: 1, Program: "x", MaxRestarts: -1},
	} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", o)
		}
	}
	err := Run(context.Background(), Options{NProcPerNode: 1, Program: "/nonexistent/prog", Stderr: &lockedBuffer{}})
	if err == nil || !strings.Contains(err.Error(), "start rank 0") {
		t.Errorf("missing program: %v", err)
	}
}

// fakeRendezvous checks the seam: Run takes ranks and master from it.
type fakeRendezvous struct {
	attempts []int
	ends     []error
}

func (f *fakeRendezvous) Next(ctx context.Context, attempt int) (Assignment, error) {
	f.attempts = append(f.attempts, attempt)
	return Assignment{NodeRank: 1, NNodes: 2, RankOffset: 2, WorldSize: 4, MasterAddr: "h0", MasterPort: 4000, Token: "tok"}, nil
}

func (f *fakeRendezvous) ReportEnd(attempt int, err error) { f.ends = append(f.ends, err) }

func TestRun_rendezvousSeam(t *testing.T) {
	j := newFakeJob(t)
	rz := &fakeRendezvous{}
	o := j.options(2, "env", nil)
	o.Rendezvous = rz
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	envs := envOf(j.stdout.lines())
	for lr, r := range []int{2, 3} {
		e := envs[r]
		if e["LOCAL_RANK"] != fmt.Sprint(lr) || e["WORLD_SIZE"] != "4" || e["NODE_RANK"] != "1" ||
			e["NNODES"] != "2" || e["MASTER_ADDR"] != "h0" || e["DDP_TOKEN"] != "tok" {
			t.Errorf("rank %d env %v", r, e)
		}
	}
	if !slices.Equal(rz.attempts, []int{0}) || len(rz.ends) != 1 || rz.ends[0] != nil {
		t.Errorf("attempts %v ends %v", rz.attempts, rz.ends)
	}
}

// Issue 22, item 7: rank 1 exits first, with a peer's rendezvous EOF; rank 0, whose own error is
// the cause, prints it and exits a moment later. The report and the exit code are rank 0's.
func TestRun_rootCauseIsNotTheFirstExit(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "", map[int]string{
		0: "ignoreterm,ready,await:ready-1,sleep:300ms,echoerr:error: data: MNIST file train-images-idx3-ubyte(.gz) not found in /nonexistent,exit:3",
		1: "await:ready-0,echoerr:error: rendezvous at 127.0.0.1:46831: rpc error: code = Unavailable desc = error reading from server: EOF,ready,exit:1",
	})
	err := waitRun(t, runAsync(o), 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || ExitCode(err) != 3 {
		t.Fatalf("Run: %v, want rank 0's exit status 3 (the root cause), not rank 1's follow-on", err)
	}
	report := j.stderr.String()
	first := strings.Index(report, "ddplaunch: rank 0 (local rank 0")
	also := strings.Index(report, "ddplaunch: rank 1 also failed (exit status 1)")
	if first < 0 || also < first || !strings.Contains(report[also:], "a consequence: its error says a peer went away") {
		t.Errorf("report does not put rank 0 first and rank 1 as a consequence:\n%s", report)
	}
}

// Two failures of their own: the one whose error line came first is the root, although the other
// exited first.
func TestRun_rootCauseIsTheEarliestError(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "", map[int]string{
		0: "await:ready-1,sleep:300ms,echoerr:error: out of memory,exit:3",
		1: "ignoreterm,echoerr:error: disk on fire,ready,sleep:1500ms,exit:2",
	})
	err := waitRun(t, runAsync(o), 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || ExitCode(err) != 2 {
		t.Fatalf("Run: %v, want rank 1's exit status 2 (its error came first)", err)
	}
	if report := j.stderr.String(); !strings.Contains(report, "ddplaunch: rank 0 also failed (exit status 3), ") ||
		!strings.Contains(report, " after rank 1: error: out of memory") {
		t.Errorf("report:\n%s", report)
	}
}

// blockingRendezvous waits for hosts that never come, as a multi-host round can for minutes.
type blockingRendezvous struct{}

func (blockingRendezvous) Next(ctx context.Context, attempt int) (Assignment, error) {
	<-ctx.Done()
	return Assignment{}, ctx.Err()
}

// A signal while the rendezvous waits ends the wait at once (issue 22: SIGTERM ignored for minutes).
func TestRun_signalDuringRendezvous(t *testing.T) {
	j := newFakeJob(t)
	sigs := make(chan os.Signal, 1)
	o := j.options(2, "pid", nil)
	o.Rendezvous, o.Signals = blockingRendezvous{}, sigs
	c := runAsync(o)
	time.Sleep(100 * time.Millisecond)
	sigs <- syscall.SIGTERM
	err := waitRun(t, c, 5*time.Second)
	var se *SignalError
	if !errors.As(err, &se) || ExitCode(err) != 143 {
		t.Fatalf("Run: %v, want stopped by SIGTERM (143)", err)
	}
	if _, err := os.Stat(j.path("pid", 0, 0)); err == nil {
		t.Error("a worker started")
	}
}

// Issue 30, item 6: an error every rank meets (a data path missing on the host) is shown once,
// not once per rank: the console shows the first rank's fatal line ("PROG: message") and keeps
// the others' identical ones off it, and the failure report shows the line in the root's tail
// and names the other rank "with the same error". Both ranks print it before either exits.
func TestRun_sameErrorOfEveryRankPrintedOnce(t *testing.T) {
	j := newFakeJob(t)
	self, _ := os.Executable()
	msg := filepath.Base(self) + ": data: MNIST file train-images-idx3-ubyte(.gz) not found in /nonexistent"
	o := j.options(2, "", map[int]string{
		0: "ignoreterm,ready,await:ready-1,echoerr:" + msg + ",pid,await:pid-1,exit:1",
		1: "ignoreterm,ready,await:ready-0,echoerr:" + msg + ",pid,await:pid-0,exit:1",
	})
	err := waitRun(t, runAsync(o), 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || ExitCode(err) != 1 {
		t.Fatalf("Run: %v, want a worker's exit status 1", err)
	}
	out := j.stderr.String()
	if n := strings.Count(out, "] "+msg+"\n"); n != 1 {
		t.Errorf("the ranks' identical error shown %d times on the console, want once:\n%s", n, out)
	}
	if n := strings.Count(out, msg); n != 2 { // the console's line and the report's tail
		t.Errorf("the error printed %d times in all, want 2 (the console, the root's tail):\n%s", n, out)
	}
	other := 1 - we.Rank
	if want := fmt.Sprintf("ddplaunch: rank %d also failed (exit status 1), ", other); !strings.Contains(out, want) ||
		!strings.Contains(out, fmt.Sprintf("with the same error as rank %d\n", we.Rank)) {
		t.Errorf("the report does not name rank %d as failing with rank %d's error:\n%s", other, we.Rank, out)
	}
}
