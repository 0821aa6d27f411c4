package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as a worker program: with DDPLAUNCH_TEST_WORKER set it runs testWorker
// instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("DDPLAUNCH_TEST_WORKER") != "" {
		os.Exit(testWorker())
	}
	os.Exit(m.Run())
}

// testWorker is a tiny distributed program that needs nothing but the launcher's environment:
// global rank 0 listens at MASTER_ADDR:MASTER_PORT and collects one "rank R of W" line from every
// other rank, the others dial it (retrying, as a real worker's rendezvous does) and send theirs.
// Connections that send nothing (the static rendezvous's probe) are skipped.
func testWorker() int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	master := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	me := fmt.Sprintf("rank %d of %d", rank, world)
	where := fmt.Sprintf("node %s local %s group_world_size %s", os.Getenv("NODE_RANK"), os.Getenv("LOCAL_RANK"), os.Getenv("GROUP_WORLD_SIZE"))
	if rank == 0 {
		l, err := net.Listen("tcp", master)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			return 3
		}
		defer l.Close()
		var heard []string
		for len(heard) < world-1 {
			c, err := l.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, "error:", err)
				return 3
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil {
				heard = append(heard, strings.TrimSpace(line))
			}
		}
		sort.Strings(heard)
		fmt.Printf("%s (%s) heard: %s\n", me, where, strings.Join(heard, "; "))
		return 0
	}
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("tcp", master)
		if err == nil {
			fmt.Fprintf(c, "%s\n", me)
			c.Close()
			break
		}
		if time.Now().After(end) {
			fmt.Fprintln(os.Stderr, "error: rank", rank, "could not reach", master, err)
			return 4
		}
	}
	fmt.Printf("%s (%s) told rank 0\n", me, where)
	return 0
}

// launcherProc is one ddplaunch started in the background.
type launcherProc struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
	done     chan error
}

func startLauncher(t *testing.T, bin string, env []string, args ...string) *launcherProc {
	t.Helper()
	p := &launcherProc{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit code, failing the test after d.
func (p *launcherProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return exitCode(t, err)
	case <-time.After(d):
		t.Fatalf("ddplaunch %q still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, d, p.out.String(), p.err.String())
		return -1
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Static multi-host rendezvous, two ddplaunch processes on loopback as two hosts: node 1 starts
// first and waits for the master; node 0's ranks are 0 and 1, node 1's are 2 and 3, and rank 0
// hears from every other rank at MASTER_ADDR:MASTER_PORT.
func TestDdplaunch_staticTwoHosts(t *testing.T) {
	bin := buildLauncher(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(freePort(t))
	worker := []string{"DDPLAUNCH_TEST_WORKER=1"}
	common := []string{"--nnodes", "2", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port, "--rdzv-timeout", "60s"}
	n1 := startLauncher(t, bin, worker, append(append([]string{"--node_rank", "1"}, common...), self, "-test.run=^$")...)
	time.Sleep(500 * time.Millisecond)
	n0 := startLauncher(t, bin, worker, append(append([]string{"--node-rank", "0"}, common...), self, "-test.run=^$")...)
	for i, p := range []*launcherProc{n0, n1} {
		if code := p.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("node %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, code, p.out.String(), p.err.String())
		}
	}
	t.Logf("node 0:\n%snode 1:\n%s", n0.out.String(), n1.out.String())
	for _, want := range []string{
		"[rank 0] rank 0 of 4 (node 0 local 0 group_world_size 2) heard: rank 1 of 4; rank 2 of 4; rank 3 of 4\n",
		"[rank 1] rank 1 of 4 (node 0 local 1 group_world_size 2) told rank 0\n",
	} {
		if !strings.Contains(n0.out.String(), want) {
			t.Errorf("node 0's stdout lacks %q:\n%s", want, n0.out.String())
		}
	}
	for _, want := range []string{
		"[rank 2] rank 2 of 4 (node 1 local 0 group_world_size 2) told rank 0\n",
		"[rank 3] rank 3 of 4 (node 1 local 1 group_world_size 2) told rank 0\n",
	} {
		if !strings.Contains(n1.out.String(), want) {
			t.Errorf("node 1's stdout lacks %q:\n%s", want, n1.out.String())
		}
	}
	if !strings.Contains(n1.err.String(), "waiting for the master") {
		t.Errorf("node 1 did not wait for the master:\n%s", n1.err.String())
	}
}

// A node that cannot reach the master within --rdzv-timeout fails (exit 1) naming it, having
// started no worker.
func TestDdplaunch_staticMasterUnreachable(t *testing.T) {
	bin := buildLauncher(t)
	dir := t.TempDir()
	master := "127.0.0.1:" + strconv.Itoa(freePort(t))
	host, port, _ := net.SplitHostPort(master)
	p := startLauncher(t, bin, []string{"D=" + dir}, "--nnodes", "2", "--node_rank", "1", "--master_addr", host, "--master_port", port,
		"--rdzv_conf", "timeout=1", "sh", "-c", `touch "$D/ran-$RANK"`)
	start := time.Now()
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, p.err.String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v with a 1s timeout", took)
	}
	for _, want := range []string{"node rank 1 could not reach the master " + master, "within 1s", "--node-rank 0"} {
		if !strings.Contains(p.err.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.err.String())
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "ran-*")); len(m) > 0 {
		t.Errorf("workers started: %v", m)
	}
}

// A .py PROGRAM runs through python3 from $PATH (here a stand-in that records its arguments),
// -m MODULE as python -m, $PYTHON_EXEC overrides the interpreter, --no-python runs the file
// itself, and no interpreter at all is exit 127 with what to do. ddplaunch says which interpreter
// runs the script, and after a failed job how to choose another.
func TestDdplaunch_pythonPrograms(t *testing.T) {
	bin := buildLauncher(t)
	dir := t.TempDir()
	fakeBin := filepath.Join(dir, "bin")
	os.Mkdir(fakeBin, 0o755)
	os.WriteFile(filepath.Join(fakeBin, "python3"), []byte("#!/bin/sh\necho \"python3 rank $RANK args: $*\"\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "other-python"), []byte("#!/bin/sh\necho \"other-python args: $*\"\n"), 0o755)
	// An executable .py file that is really a shell script: --no-python runs it as it is.
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("#!/bin/sh\necho \"ran itself with $*\"\n"), 0o755)
	path := "PATH=" + fakeBin + ":" + os.Getenv("PATH")
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want []string
		say  string // on stderr
	}{
		{"script", []string{path}, []string{"--nproc_per_node", "2", "train.py", "--lr", "0.1"},
			[]string{"[rank 0] python3 rank 0 args: -u train.py --lr 0.1\n", "[rank 1] python3 rank 1 args: -u train.py --lr 0.1\n"},
			"ddplaunch: train.py runs with python3 (" + filepath.Join(fakeBin, "python3") + ", python3 from $PATH; set $PYTHON_EXEC to use another)"},
		{"module", []string{path}, []string{"-m", "pkg.train", "--x", "1"}, []string{"[rank 0] python3 rank 0 args: -u -m pkg.train --x 1\n"}, "pkg.train runs with python3"},
		{"run path", []string{path}, []string{"--run_path", "/abs/train"}, []string{"[rank 0] python3 rank 0 args: -u /abs/train\n"}, "/abs/train runs with python3"},
		{"PYTHON_EXEC", []string{path, "PYTHON_EXEC=" + filepath.Join(dir, "other-python")}, []string{"train.py"},
			[]string{"[rank 0] other-python args: -u train.py\n"}, "(" + filepath.Join(dir, "other-python") + ", from $PYTHON_EXEC)"},
		{"no python", []string{path}, []string{"--no_python", "./train.py", "a"}, []string{"[rank 0] ran itself with a\n"}, ""},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), tt.env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Errorf("%s: %v\n%s", tt.name, err, errb.String())
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: stdout lacks %q:\n%s", tt.name, w, out.String())
			}
		}
		if !strings.Contains(errb.String(), tt.say) {
			t.Errorf("%s: stderr lacks %q:\n%s", tt.name, tt.say, errb.String())
		}
	}
	// A script that fails as one does under an interpreter without torch: the worker's own exit
	// code (ddplaunch passes it on, see README's torchrun table), and a hint naming the
	// interpreter and $PYTHON_EXEC.
	os.WriteFile(filepath.Join(dir, "no-torch"), []byte("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"), 0o755)
	cmd := exec.Command(bin, "train.py")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "PYTHON_EXEC="+filepath.Join(dir, "no-torch"))
	var failed bytes.Buffer
	cmd.Stderr = &failed
	if code := exitCode(t, cmd.Run()); code != 1 || !strings.Contains(failed.String(), "the workers ran "+filepath.Join(dir, "no-torch")+"; if a module was not found (torch?), set $PYTHON_EXEC") {
		t.Errorf("a failing script: exit %d, want 1 with the interpreter hint:\n%s", code, failed.String())
	}
	// No interpreter anywhere on $PATH.
	cmd = exec.Command(bin, "train.py")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "PATH="+filepath.Join(dir, "empty"), "PYTHON_EXEC=")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if code := exitCode(t, cmd.Run()); code != 127 || !strings.Contains(errb.String(), "--no-python") ||
		!strings.Contains(errb.String(), "PYTHON_EXEC") || !strings.Contains(errb.String(), "train.py runs with the Python interpreter") {
		t.Errorf("no python3: exit %d, want 127 saying what to do:\n%s", code, errb.String())
	}
}

// The environment a worker sees: torchrun's variables with torchrun's values, OMP_NUM_THREADS=1
// with two workers (with the warning), the user's value when set.
func TestDdplaunch_workerEnv(t *testing.T) {
	bin := buildLauncher(t)
	run := func(env []string, args ...string) (map[int]map[string]string, string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "env")...)
		cmd.Env = append(withoutEnv(os.Environ(), "OMP_NUM_THREADS"), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, errb.String())
		}
		re := regexp.MustCompile(`^\[rank (\d+)\] ([A-Z_0-9]+)=(.*)$`)
		envs := map[int]map[string]string{}
		for _, l := range strings.Split(out.String(), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				r, _ := strconv.Atoi(m[1])
				if envs[r] == nil {
					envs[r] = map[string]string{}
				}
				envs[r][m[2]] = m[3]
			}
		}
		return envs, errb.String()
	}
	envs, stderr := run([]string{"TORCHELASTIC_RUN_ID=inherited", "ROLE_RANK=9"},
		"--nproc_per_node", "2", "--max_restarts", "1", "--role", "trainer", "--rdzv_id", "job-9")
	for r := 0; r < 2; r++ {
		want := map[string]string{
			"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "trainer", "ROLE_RANK": strconv.Itoa(r), "ROLE_WORLD_SIZE": "2",
			"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "1", "TORCHELASTIC_RUN_ID": "job-9",
			"TORCHELASTIC_USE_AGENT_STORE": "False", "OMP_NUM_THREADS": "1", "DDP_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1",
		}
		for k, v := range want {
			if envs[r][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, envs[r][k], v)
			}
		}
	}
	if !strings.Contains(stderr, "setting OMP_NUM_THREADS=1") {
		t.Errorf("no OMP_NUM_THREADS warning:\n%s", stderr)
	}
	envs, stderr = run([]string{"OMP_NUM_THREADS=6"}, "--standalone", "--nproc_per_node", "2")
	if envs[1]["OMP_NUM_THREADS"] != "6" || strings.Contains(stderr, "OMP_NUM_THREADS") ||
		!regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(envs[0]["TORCHELASTIC_RUN_ID"]) {
		t.Errorf("--standalone with OMP_NUM_THREADS=6: env %v\n%s", envs[1], stderr)
	}
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// --log_dir in torchrun's layout, with -r 3: nothing of the workers on the console, everything
// in LOG_DIR/RUN_ID_x/attempt_0/LOCAL_RANK/{stdout,stderr}.log (and rank-N.log as before).
func TestDdplaunch_logDirLayout(t *testing.T) {
	bin := buildLauncher(t)
	logs := filepath.Join(t.TempDir(), "logs")
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, "--nproc_per_node", "2", "--log_dir", logs, "--rdzv_id", "run7", "-r", "3",
		"sh", "-c", `echo "out of $LOCAL_RANK"; echo "err of $LOCAL_RANK" >&2; echo "error file $TORCHELASTIC_ERROR_FILE"`)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if strings.Contains(out.String()+errb.String(), "of 0") {
		t.Errorf("redirected lines on the console:\n%s\n%s", out.String(), errb.String())
	}
	runs, _ := filepath.Glob(filepath.Join(logs, "run7_*"))
	if len(runs) != 1 {
		t.Fatalf("run dirs %v, want one run7_x", runs)
	}
	for lr := 0; lr < 2; lr++ {
		d := filepath.Join(runs[0], "attempt_0", strconv.Itoa(lr))
		so, _ := os.ReadFile(filepath.Join(d, "stdout.log"))
		se, _ := os.ReadFile(filepath.Join(d, "stderr.log"))
		if want := fmt.Sprintf("out of %d\nerror file %s\n", lr, filepath.Join(d, "error.json")); string(so) != want {
			t.Errorf("%s/stdout.log %q, want %q", d, so, want)
		}
		if want := fmt.Sprintf("err of %d\n", lr); string(se) != want {
			t.Errorf("%s/stderr.log %q, want %q", d, se, want)
		}
		if b, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("rank-%d.log", lr))); err != nil || !strings.Contains(string(b), fmt.Sprintf("out of %d", lr)) {
			t.Errorf("rank-%d.log: %q %v", lr, b, err)
		}
	}
}

// torchPython finds an interpreter that imports torch: $PYTHON_EXEC, python3 on $PATH, then
// /usr/bin/python3 (a distribution's python3-torch next to a pyenv python3). "" when none does.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{os.Getenv("PYTHON_EXEC"), "python3", "/usr/bin/python3"} {
		if py == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := exec.CommandContext(ctx, py, "-c", "import torch.distributed").Run()
		cancel()
		if err == nil {
			return py
		}
	}
	return ""
}

// The issue's test with real PyTorch: `ddplaunch --nproc_per_node 2 --standalone
// scripts/torchrun_smoke.py`, a gloo all_reduce set up from the environment alone; both ranks
// print the right sum. Then the same script over the static rendezvous of two ddplaunch processes
// (two "hosts" of two workers). Skipped without a python3 that imports torch.
func TestDdplaunch_torchGloo(t *testing.T) {
	py := torchPython(t)
	if py == "" {
		t.Skip("no python3 that can `import torch` ($PYTHON_EXEC, python3 on $PATH, /usr/bin/python3)")
	}
	bin := buildLauncher(t)
	script, _ := filepath.Abs("../../scripts/torchrun_smoke.py")
	env := []string{"PYTHON_EXEC=" + py}
	line := regexp.MustCompile(`(?m)^\[rank (\d)\] torchrun_smoke: rank (\d) of (\d) .*: all_reduce sum \[(\S+), (\S+)\] want .* ok$`)
	check := func(name, out string, ranks []int, world int) {
		t.Helper()
		got := map[int]bool{}
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			wantSum := float64(world*(world+1)) / 2
			if m[1] != m[2] || m[3] != strconv.Itoa(world) || m[4] != strconv.FormatFloat(wantSum, 'f', 1, 64) {
				t.Errorf("%s: %q", name, m[0])
			}
			r, _ := strconv.Atoi(m[1])
			got[r] = true
		}
		for _, r := range ranks {
			if !got[r] {
				t.Errorf("%s: rank %d printed no right sum:\n%s", name, r, out)
			}
		}
	}

	p := startLauncher(t, bin, env, "--nproc_per_node", "2", "--standalone", script)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("--standalone: exit %d\n%s\n%s", code, p.out.String(), p.err.String())
	}
	t.Logf("ddplaunch --nproc_per_node 2 --standalone scripts/torchrun_smoke.py (%s):\n%s", py, p.out.String())
	check("--standalone", p.out.String(), []int{0, 1}, 2)

	port := strconv.Itoa(freePort(t))
	common := []string{"--nnodes", "2", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port, script}
	n1 := startLauncher(t, bin, env, append([]string{"--node_rank", "1"}, common...)...)
	n0 := startLauncher(t, bin, env, append([]string{"--node_rank", "0"}, common...)...)
	for i, p := range []*launcherProc{n0, n1} {
		if code := p.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("static, node %d: exit %d\n%s\n%s", i, code, p.out.String(), p.err.String())
		}
	}
	t.Logf("static rendezvous, two ddplaunch of 2 workers:\n%s%s", n0.out.String(), n1.out.String())
	check("static node 0", n0.out.String(), []int{0, 1}, 4)
	check("static node 1", n1.out.String(), []int{2, 3}, 4)
}
