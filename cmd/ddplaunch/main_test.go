package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	trainer := func() (string, error) { return "/bin/ddptrain", nil }
	noTrainer := func() (string, error) { return "", errors.New("no ddptrain") }
	tests := []struct {
		args     []string
		find     func() (string, error)
		wantProg string
		wantArgs []string
		wantErr  string
	}{
		{args: []string{"--nproc-per-node", "2", "prog", "--lr", "1"}, wantProg: "prog", wantArgs: []string{"--lr", "1"}},
		{args: []string{"--nproc-per-node=2", "--", "prog", "-x"}, wantProg: "prog", wantArgs: []string{"-x"}},
		{args: []string{"--config", "c.yaml", "--set", "a=1,2", "--set", "b=x"}, find: trainer,
			wantProg: "/bin/ddptrain", wantArgs: []string{"--config", "c.yaml", "--set", "a=1,2", "--set", "b=x"}},
		{args: []string{"--config", "c.yaml", "--", "--trace", "t.json"}, find: trainer,
			wantProg: "/bin/ddptrain", wantArgs: []string{"--config", "c.yaml", "--trace", "t.json"}},
		{args: []string{"--config", "c.yaml"}, find: noTrainer, wantErr: "no ddptrain"},
		{args: []string{"--config", "c.yaml", "prog"}, find: trainer, wantErr: "after --"},
		{args: []string{"--config", "c.yaml", "--trace", "t"}, find: trainer, wantErr: "go after --"},
		{args: []string{"--set", "a=1", "prog"}, wantErr: "--set needs --config"},
		{args: []string{"--nproc-per-node", "2"}, wantErr: "no PROGRAM"},
		{args: []string{"--nnodes", "2", "prog"}, wantErr: "needs --join"},
		{args: []string{"--max-restarts", "-1", "prog"}, wantErr: "want 0 or more"},
	}
	for _, tt := range tests {
		find := tt.find
		if find == nil {
			find = noTrainer
		}
		c, err := parseArgs(tt.args, find)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if c.opts.Program != tt.wantProg || !slices.Equal(c.opts.Args, tt.wantArgs) {
			t.Errorf("%q: program %q args %q, want %q %q", tt.args, c.opts.Program, c.opts.Args, tt.wantProg, tt.wantArgs)
		}
	}
}

// buildLauncher builds ddplaunch into a temporary directory and returns its path.
func buildLauncher(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds ddplaunch")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "ddplaunch")
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return ee.ExitCode()
}

func TestDdplaunch_endToEnd(t *testing.T) {
	bin := buildLauncher(t)

	t.Run("success", func(t *testing.T) {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, "--nproc-per-node", "2", "sh", "-c", "echo hi $RANK of $WORLD_SIZE")
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, errb.String())
		}
		for _, want := range []string{"[rank 0] hi 0 of 2\n", "[rank 1] hi 1 of 2\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("stdout lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("failure status", func(t *testing.T) {
		var errb bytes.Buffer
		cmd := exec.Command(bin, "--nproc-per-node", "2", "--grace", "2s", "sh", "-c",
			`if [ $RANK = 1 ]; then echo bad news; exit 5; fi; sleep 30`)
		cmd.Stderr = &errb
		start := time.Now()
		if code := exitCode(t, cmd.Run()); code != 5 {
			t.Errorf("exit code %d, want 5\n%s", code, errb.String())
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("took %v", time.Since(start))
		}
		if s := errb.String(); !strings.Contains(s, "rank 1 (local rank 1, pid") || !strings.Contains(s, "    bad news") {
			t.Errorf("stderr does not report rank 1:\n%s", s)
		}
	})

	t.Run("usage error", func(t *testing.T) {
		if code := exitCode(t, exec.Command(bin, "--nproc-per-node", "2").Run()); code != 2 {
			t.Errorf("exit code %d, want 2", code)
		}
	})

	// A config that loads (ddplaunch validates it before starting workers), in the directory the
	// launcher runs in, and a stand-in ddptrain next to ddplaunch that records its arguments.
	cdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cdir, "c.yaml"), []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(filepath.Dir(bin), "ddptrain")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"args: $*\"\ntouch ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(fake)

	t.Run("config runs ddptrain", func(t *testing.T) {
		cmd := exec.Command(bin, "--nproc-per-node", "1", "--config", "c.yaml", "--set", "model.widths=[784,64,10]",
			"--", "--trace", "t.json")
		cmd.Dir = cdir
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := "[rank 0] args: --config c.yaml --set model.widths=[784,64,10] --trace t.json\n"; !strings.Contains(string(out), want) {
			t.Errorf("stdout %q, want %q", out, want)
		}
	})

	// A bad config is reported once, by the launcher, with exit status 2, and no worker starts.
	t.Run("config error before any worker", func(t *testing.T) {
		os.Remove(filepath.Join(cdir, "ran"))
		for _, args := range [][]string{
			{"--config", "c.yaml", "--set", "train.optimizer=adam"},
			{"--config", "c.yaml", "--set", "train.lr_rate=1"},
			{"--config", "missing.yaml"},
		} {
			var out, errb bytes.Buffer
			cmd := exec.Command(bin, append([]string{"--nproc-per-node", "2"}, args...)...)
			cmd.Dir, cmd.Stdout, cmd.Stderr = cdir, &out, &errb
			if code := exitCode(t, cmd.Run()); code != 2 {
				t.Errorf("%q: exit code %d, want 2\n%s", args, code, errb.String())
			}
			if n := strings.Count(errb.String(), "config:"); n != 1 || !strings.HasPrefix(errb.String(), "ddplaunch: config: ") {
				t.Errorf("%q: want the config error once, from ddplaunch:\n%s", args, errb.String())
			}
			if _, err := os.Stat(filepath.Join(cdir, "ran")); err == nil || out.Len() > 0 {
				t.Errorf("%q: a worker ran: %q", args, out.String())
			}
		}
	})

	// SIGTERM to ddplaunch reaches every worker; the launcher exits 143 and leaves nothing behind.
	t.Run("SIGTERM forwarded", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(bin, "--nproc-per-node", "2", "--grace", "5s", "sh", "-c",
			`trap 'echo term > $D/term-$RANK; exit 143' TERM; echo $$ > $D/pid-$RANK.tmp; mv $D/pid-$RANK.tmp $D/pid-$RANK; while :; do sleep 0.1; done`)
		cmd.Env = append(os.Environ(), "D="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids := waitPids(t, dir, 2)
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if code := exitCode(t, err); code != 143 {
				t.Errorf("exit code %d, want 143", code)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatal("ddplaunch did not exit after SIGTERM")
		}
		for r := 0; r < 2; r++ {
			if b, err := os.ReadFile(filepath.Join(dir, "term-"+strconv.Itoa(r))); err != nil || string(b) != "term\n" {
				t.Errorf("rank %d did not get SIGTERM: %q %v", r, b, err)
			}
		}
		for _, p := range pids {
			assertGone(t, p)
		}
	})

	// SIGKILL to ddplaunch: Pdeathsig takes the workers down with it.
	t.Run("SIGKILL of the launcher", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(bin, "--nproc-per-node", "2", "sh", "-c",
			`echo $$ > $D/pid-$RANK.tmp; mv $D/pid-$RANK.tmp $D/pid-$RANK; exec sleep 1000`)
		cmd.Env = append(os.Environ(), "D="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids := waitPids(t, dir, 2)
		cmd.Process.Kill()
		cmd.Wait()
		for _, p := range pids {
			assertGone(t, p)
		}
	})
}

// testConfig is a valid run config (ddplaunch loads it; the stand-in ddptrain does not train it).
const testConfig = `
model: {kind: mlp, widths: [784, 32, 10]}
train: {epochs: 1, micro_batch: 64, lr: 0.01}
data: {kind: mnist, path: /nonexistent/mnist}
`

func waitPids(t *testing.T, dir string, n int) []int {
	t.Helper()
	var pids []int
	deadline := time.Now().Add(30 * time.Second)
	for r := 0; r < n; r++ {
		for {
			b, err := os.ReadFile(filepath.Join(dir, "pid-"+strconv.Itoa(r)))
			if err == nil {
				p, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, p)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pid file for rank %d", r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return pids
}

// assertGone fails unless pid is dead (gone, or a zombie that init has not reaped yet).
func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if b, rerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); rerr == nil {
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && s[i+2] == 'Z' {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("pid %d still alive", pid)
			syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
