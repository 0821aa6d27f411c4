package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 22, item 8: negative or nonsense values are refused, naming the flag; none silently
// becomes a default.
func TestParseArgs_refusesNonsense(t *testing.T) {
	noTrainer := func() (string, error) { return "", nil }
	multi := []string{"--nnodes", "2:3", "--join", "10.0.0.1"}
	for _, tt := range []struct {
		args    []string
		wantErr string // "" = accepted
	}{
		{[]string{"--grace", "-1s"}, "--grace -1s: want a duration above 0"},
		{[]string{"--grace", "0"}, "--grace 0s"},
		{[]string{"--grace", "ten"}, `invalid argument "ten" for "--grace"`},
		{[]string{"--max-restarts", "-1"}, "--max-restarts -1"},
		{[]string{"--max-restarts", "1.5"}, `"--max-restarts"`},
		{[]string{"--master-port", "70000"}, "--master-port 70000"},
		{[]string{"--master-port", "-1"}, "--master-port -1"},
		{[]string{"--master-addr", ""}, "--master-addr"},
		{[]string{"--nnodes", "0"}, "--nnodes"},
		{[]string{"--nnodes", "3:2"}, "--nnodes"},
		{[]string{"--nnodes", "-2"}, "--nnodes"},
		{[]string{"--nnodes", "2:3", "--node-rank", "-1", "--join", "h"}, "--node-rank"},
		{[]string{"--nnodes", "1:2", "--join", "h"}, "split brain"},
		{[]string{"--nnodes", "2:4", "--join", "h"}, "--allow-minority"},
		{[]string{"--nnodes", "1:2", "--join", "h", "--allow-minority"}, ""},
		{append([]string{"--rdzv-timeout", "-5s"}, multi...), "--rdzv-timeout -5s"},
		{[]string{"--rdzv-timeout", "-5s"}, "--rdzv-timeout -5s"}, // on one host too: refused, not ignored
		{[]string{"--bind", "0.0.0.0:99999"}, "--bind"},
		{append([]string{"--rdzv-timeout", "0"}, multi...), "--rdzv-timeout 0s"},
		{append([]string{"--rdzv-last-call", "-1s"}, multi...), "--rdzv-last-call -1s"},
		{append([]string{"--rdzv-id", ""}, multi...), "--rdzv-id"},
		{append([]string{"--rdzv-id", "a b"}, multi...), "--rdzv-id"},
		{append([]string{"--rdzv-id", strings.Repeat("j", 97)}, multi...), "--rdzv-id"},
		{append([]string{"--bind", "0.0.0.0:0"}, multi...), "--bind"},
		{append([]string{"--bind", "0.0.0.0"}, multi...), "--bind"},
		{append([]string{"--bind", "myhost:7946"}, multi...), "--bind"},
		{append([]string{"--advertise-addr", "not-an-ip"}, multi...), "--advertise-addr"},
		{append([]string{"--gossip", "fast"}, multi...), "--gossip \"fast\""},
		{[]string{"--nnodes", "2:3", "--join", "h:0"}, "--join"},
		{[]string{"--nnodes", "2:3", "--join", "h:x"}, "--join"},
		{[]string{"--nnodes", "2:3", "--join", "h:"}, "--join"},
		{[]string{"--nnodes", "2:3", "--join", ":7946"}, "--join"},
		{[]string{"--nnodes", "2:3", "--join", "h1,h2:7000,[fe80::1]:7946,fe80::2", "--bind", "10.0.0.1:7946", "--rdzv-id", "slurm-12_3"}, ""},
		{[]string{"--grace", "100ms", "--max-restarts", "0", "--master-port", "0"}, ""},
	} {
		_, err := parseArgs(append(tt.args, "prog"), noTrainer)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want one with %q", tt.args, err, tt.wantErr)
		}
	}
}

// ddplaunch's exit codes, as --help documents them.
func TestDdplaunch_exitCodes(t *testing.T) {
	bin := buildLauncher(t)
	run := func(env []string, args ...string) (int, string) {
		t.Helper()
		var errb bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &errb
		cmd.Env = append(os.Environ(), env...)
		return exitCode(t, cmd.Run()), errb.String()
	}
	dir := t.TempDir()
	touch := []string{"sh", "-c", `touch "$D/ran-$RANK"`}
	noExec := filepath.Join(dir, "not-executable")
	os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644)

	for _, tt := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"too many workers", append([]string{"--nproc-per-node", "100000"}, touch...), 2, "--oversubscribe"},
		{"negative grace", append([]string{"--grace", "-1s"}, touch...), 2, "--grace -1s"},
		{"split-brain risk", append([]string{"--nnodes", "1:2", "--join", "127.0.0.1:1"}, touch...), 2, "--allow-minority"},
		{"no program", []string{"--nproc-per-node", "1", filepath.Join(dir, "no-such-program")}, 127, "start rank 0"},
		{"not executable", []string{"--nproc-per-node", "1", noExec}, 126, "start rank 0"},
		{"killed by a signal", []string{"--nproc-per-node", "1", "sh", "-c", "kill -9 $$"}, 137, "killed by signal 9"},
		{"a worker's code", []string{"--nproc-per-node", "2", "sh", "-c", `[ "$RANK" = 1 ] && exit 40; exec sleep 30`}, 40, "exit status 40"},
	} {
		code, stderr := run([]string{"D=" + dir}, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.say) {
			t.Errorf("%s: exit %d, want %d; stderr should say %q:\n%s", tt.name, code, tt.code, tt.say, stderr)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "ran-*")); len(m) > 0 {
		t.Errorf("workers ran although the launcher refused: %v", m)
	}
	out, err := exec.Command(bin, "--help").Output()
	if err != nil || !strings.Contains(string(out), "exit status:") || !strings.Contains(string(out), "126, 127") {
		t.Errorf("--help: %v, no exit status section:\n%s", err, out)
	}
}

// Issue 22, item 7, with real processes: rank 1 exits first with a rendezvous EOF; rank 0,
// whose own error is the cause, ignores SIGTERM, prints it half a second later and exits 3.
func TestDdplaunch_reportsTheRootFailure(t *testing.T) {
	bin := buildLauncher(t)
	var errb bytes.Buffer
	cmd := exec.Command(bin, "--nproc-per-node", "2", "--grace", "5s", "sh", "-c", `
if [ "$RANK" = 1 ]; then
  while [ ! -e "$D/trapped" ]; do sleep 0.01; done
  echo "error: rendezvous at $MASTER_ADDR:$MASTER_PORT: rpc error: code = Unavailable desc = error reading from server: EOF" >&2
  exit 1
fi
trap '' TERM
touch "$D/trapped"
sleep 0.5
echo "sh: data: MNIST file train-images-idx3-ubyte(.gz) not found in /nonexistent" >&2
exit 3`)
	cmd.Env = append(os.Environ(), "D="+t.TempDir())
	cmd.Stderr = &errb
	code := exitCode(t, cmd.Run())
	s := errb.String()
	root, also := strings.Index(s, "ddplaunch: rank 0 (local rank 0"), strings.Index(s, "ddplaunch: rank 1 also failed")
	if code != 3 || root < 0 || also < root {
		t.Errorf("exit %d, want rank 0's 3, reported first:\n%s", code, s)
	}
}

// Issue 22, item 5: SIGTERM while thousands of workers are being started stops the starting at
// once; the launcher exits 143 within seconds and leaves no worker behind.
func TestDdplaunch_sigtermWhileStarting(t *testing.T) {
	bin := buildLauncher(t)
	dir := t.TempDir()
	const n = 1000
	cmd := exec.Command(bin, "--oversubscribe", "--nproc-per-node", strconv.Itoa(n), "--grace", "2s", "sh", "-c",
		`echo $$ > "$D/pid-$RANK"; exec sleep 60`)
	cmd.Env = append(os.Environ(), "D="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the first worker, then stop the launcher.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "pid-0")); err == nil {
			break
		}
		if time.Now().After(end) {
			cmd.Process.Kill()
			t.Fatal("no worker started")
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(t, err); code != 143 {
			t.Errorf("exit %d, want 143", code)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("ddplaunch still running 20s after SIGTERM")
	}
	took := time.Since(sent)
	files, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
	t.Logf("exited %v after SIGTERM; %d of %d workers had started", took.Round(time.Millisecond), len(files), n)
	if len(files) >= n {
		t.Errorf("all %d workers started despite the SIGTERM", n)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			assertGone(t, pid)
		}
	}
}
