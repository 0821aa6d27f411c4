package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A worker sees torchrun's variables with torchrun's values, and OMP_NUM_THREADS=1 when a host
// runs more than one worker and none is set (with torchrun's warning), or the one given.
func TestRun_torchrunEnv(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(2, "env", nil)
	o.RunID, o.Role = "job-42", "trainer"
	o.MaxRestarts = 2
	o.Env = append(slices.DeleteFunc(slices.Clone(o.Env), func(kv string) bool { return strings.HasPrefix(kv, "OMP_NUM_THREADS=") }),
		"TORCHELASTIC_USE_AGENT_STORE=True", "ROLE_NAME=stale")
	if err := Run(context.Background(), o); err != nil {
		t.Fatalf("Run: %v\n%s", err, j.stderr)
	}
	envs := envOf(j.stdout.lines())
	for r := 0; r < 2; r++ {
		want := map[string]string{
			"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2", "TORCHELASTIC_RUN_ID": "job-42",
			"TORCHELASTIC_USE_AGENT_STORE": "False", "GROUP_WORLD_SIZE": "1", "GROUP_RANK": "0", "ROLE_NAME": "trainer",
			"ROLE_RANK": fmt.Sprint(r), "ROLE_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "DDP_RESTART_COUNT": "0",
		}
		for k, v := range want {
			if envs[r][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, envs[r][k], v)
			}
		}
		if v, ok := envs[r]["TORCHELASTIC_ERROR_FILE"]; ok {
			t.Errorf("rank %d: TORCHELASTIC_ERROR_FILE=%q without a log dir", r, v)
		}
	}
	if !strings.Contains(j.stderr.String(), "setting OMP_NUM_THREADS=1 for every worker") {
		t.Errorf("no OMP_NUM_THREADS warning:\n%s", j.stderr)
	}

	// Set by the user: passed through, no warning. One worker: not set.
	for _, c := range []struct {
		n    int
		env  []string
		want string
	}{{2, []string{"OMP_NUM_THREADS=3"}, "3"}, {1, nil, ""}} {
		j := newFakeJob(t)
		o := j.options(c.n, "env", nil)
		o.Env = append(slices.DeleteFunc(slices.Clone(o.Env), func(kv string) bool { return strings.HasPrefix(kv, "OMP_NUM_THREADS=") }), c.env...)
		if err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		if got := envOf(j.stdout.lines())[0]["OMP_NUM_THREADS"]; got != c.want || strings.Contains(j.stderr.String(), "OMP_NUM_THREADS") {
			t.Errorf("%d worker(s), env %q: OMP_NUM_THREADS=%q, want %q, and no warning:\n%s", c.n, c.env, got, c.want, j.stderr)
		}
	}
}

// --log-dir in torchrun's layout: LOG_DIR/RUN_ID_x/attempt_N/LOCAL_RANK/{stdout,stderr}.log for
// each attempt, TORCHELASTIC_ERROR_FILE pointing into it, and the root failure's error.json in
// the report. rank-N.log stays as it was.
func TestRun_logDirLayout(t *testing.T) {
	j := newFakeJob(t)
	logDir := filepath.Join(j.dir, "logs")
	// Rank 1 fails only once rank 0 has written its lines (else the stop could cut rank 0 short).
	o := j.options(2, "env,echo:out line,echoerr:err line,ready,exit:0",
		map[int]string{1: "await:ready-0,env,echo:out line,echoerr:err line,errorfile:RuntimeError: boom,failfirst:5,exit:7"})
	o.LogDir, o.RunID, o.MaxRestarts = logDir, "job/7", 1
	err := Run(context.Background(), o)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Status.Code != 7 {
		t.Fatalf("Run: %v, want rank 1 exit 7 on the second attempt\n%s", err, j.stderr)
	}
	runs, _ := filepath.Glob(filepath.Join(logDir, "job_7_*"))
	if len(runs) != 1 {
		t.Fatalf("run dirs %v, want one LOG_DIR/job_7_x", runs)
	}
	l := LogLayout{Dir: runs[0]}
	for attempt := 0; attempt < 2; attempt++ {
		for lr := 0; lr < 2; lr++ {
			out, err1 := os.ReadFile(l.StdoutPath(attempt, lr))
			errb, err2 := os.ReadFile(l.StderrPath(attempt, lr))
			if err1 != nil || err2 != nil || !strings.Contains(string(out), "out line\n") || string(errb) != "err line\n" ||
				strings.Contains(string(out), "err line") || strings.Contains(string(out), "[rank") {
				t.Errorf("attempt %d local rank %d: stdout.log %q (%v), stderr.log %q (%v)", attempt, lr, out, err1, errb, err2)
			}
			if want := "env TORCHELASTIC_ERROR_FILE=" + l.ErrorFile(attempt, lr) + "\n"; !strings.Contains(string(out), want) {
				t.Errorf("attempt %d local rank %d: stdout.log lacks %q:\n%s", attempt, lr, want, out)
			}
		}
	}
	if ReadErrorFile(l.ErrorFile(0, 1)) != "RuntimeError: boom" {
		t.Errorf("attempt 0's error.json: %q", ReadErrorFile(l.ErrorFile(0, 1)))
	}
	// The report of the failure that ended the job shows attempt 1's error file.
	if want := "ddplaunch: rank 1's error file (" + l.ErrorFile(1, 1) + "): RuntimeError: boom"; !strings.Contains(j.stderr.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, j.stderr)
	}
	// goddp's rank-N.log: both attempts, one header each.
	b, _ := os.ReadFile(RankLogPath(logDir, 1))
	if strings.Count(string(b), "=== ddplaunch: rank 1, attempt") != 2 || strings.Count(string(b), "err line") != 2 {
		t.Errorf("rank-1.log:\n%s", b)
	}
}

// --redirects takes streams off the console (to the files only), --tee puts them back, and
// --local-ranks-filter shows only the ranks it names; the files keep everything. Without
// --log-dir, --redirects makes a temporary log dir, as torchrun does.
func TestRun_redirectsTeeFilter(t *testing.T) {
	parse := func(s string) StdSpec {
		sp, err := ParseStdSpec("x", s)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	for _, tt := range []struct {
		name           string
		redirects, tee string
		filter         []int
		console        []string // lines expected on the console; every other line must not be there
	}{
		{"redirect all", "3", "0", nil, nil},
		{"redirect stdout of local rank 1", "1:1", "0", nil, []string{"[rank 0] o0", "[rank 0] e0", "[rank 1] e1"}},
		{"redirect all, tee stderr", "3", "2", nil, []string{"[rank 0] e0", "[rank 1] e1"}},
		{"filter local rank 1", "0", "0", []int{1}, []string{"[rank 1] o1", "[rank 1] e1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := newFakeJob(t)
			o := j.options(2, "", map[int]string{0: "echo:o0,echoerr:e0", 1: "echo:o1,echoerr:e1"})
			o.Redirects, o.Tee, o.ConsoleRanks = parse(tt.redirects), parse(tt.tee), tt.filter
			t.Setenv("TMPDIR", j.dir) // the temporary log dir, when one is made
			if err := Run(context.Background(), o); err != nil {
				t.Fatalf("Run: %v\n%s", err, j.stderr)
			}
			for _, l := range []string{"[rank 0] o0", "[rank 1] o1", "[rank 0] e0", "[rank 1] e1"} {
				on := slices.Contains(j.stdout.lines(), l) || slices.Contains(j.stderr.lines(), l)
				if want := slices.Contains(tt.console, l); on != want {
					t.Errorf("%q on the console: %v, want %v\nstdout:\n%s\nstderr:\n%s", l, on, want, j.stdout, j.stderr)
				}
			}
		})
	}
	// The temporary dir (made in os.TempDir(): the test's TMPDIR is the launcher's) has every line.
	j := newFakeJob(t)
	t.Setenv("TMPDIR", j.dir)
	o := j.options(1, "echo:hidden", nil)
	o.Redirects = parse("3")
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	got, _ := filepath.Glob(filepath.Join(j.dir, "ddplaunch_*", "none_*", "attempt_0", "0", "stdout.log"))
	if len(got) != 1 {
		t.Fatalf("no temporary log dir with attempt_0/0/stdout.log under %s: %v\n%s", j.dir, got, j.stderr)
	}
	if b, _ := os.ReadFile(got[0]); string(b) != "hidden\n" || strings.Contains(j.stdout.String(), "hidden") {
		t.Errorf("stdout.log %q; console %q", b, j.stdout)
	}
	if !strings.Contains(j.stderr.String(), "logs in torchrun's layout") {
		t.Errorf("the launcher does not say where the logs are:\n%s", j.stderr)
	}
}

func TestRun_redirectsCheckedAgainstNProc(t *testing.T) {
	sp, _ := ParseStdSpec("x", "0:3,2:1")
	err := Run(context.Background(), Options{NProcPerNode: 2, Program: "x", Redirects: sp})
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "--redirects: local rank 2") {
		t.Fatalf("Run: %v, want a *ConfigError naming --redirects' local rank 2", err)
	}
}
