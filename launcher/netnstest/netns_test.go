package netnstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const clusterKey = "c2VjcmV0LWtleS1mb3ItZ29kZHAtbmV0bnMtdGVzdHM=" // 32 bytes, base64
const wrongKey = "d3Jvbmcta2V5LWZvci1nb2RkcC1uZXRucy10ZXN0cyE="

// env is what the tests share: binaries, config, key files.
type env struct {
	bin, config, key, badKey string
}

var (
	setupOnce sync.Once
	setupEnv  env
	setupErr  error
)

func requireNetns(t *testing.T) env {
	t.Helper()
	if raceOn && os.Getenv("DDP_NETNS_RACE") == "" {
		t.Skip("netns suite: runs in the non-race pass of `make test` (it drives subprocesses); set DDP_NETNS_RACE=1 to run it under -race too")
	}
	if testing.Short() {
		t.Skip("netns suite: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("netns suite: needs root to create network namespaces (CI runs as root)")
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("netns suite: `ip netns` is unavailable (install iproute2): %v %s", err, out)
	}
	setupOnce.Do(func() {
		sweep()
		dir, err := os.MkdirTemp("", "ddpt-bin")
		if err != nil {
			setupErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/goddp/goddp/cmd/ddplaunch", "github.com/goddp/goddp/cmd/ddptrain")
		if out, err := cmd.CombinedOutput(); err != nil {
			setupErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		cfg, _ := filepath.Abs("../../configs/mnist-mlp.yaml")
		key, bad := filepath.Join(dir, "cluster.key"), filepath.Join(dir, "wrong.key")
		os.WriteFile(key, []byte(clusterKey+"\n"), 0o600)
		os.WriteFile(bad, []byte(wrongKey+"\n"), 0o600)
		setupEnv = env{bin: dir, config: cfg, key: key, badKey: bad}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return setupEnv
}

var nsName = regexp.MustCompile(`^ddpt(\d+)-`)

// sweep deletes namespaces left by earlier runs whose test process is gone.
func sweep() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name := strings.Fields(line + " x")[0]
		m := nsName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		killNS(name)
		exec.Command("ip", "netns", "delete", name).Run()
	}
}

// killNS SIGKILLs every process inside namespace name (only ever namespaces of these tests).
func killNS(name string) {
	out, _ := exec.Command("ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// cluster is a switch namespace with a bridge and n host namespaces, host i at 10.77.0.(i+1).
type cluster struct {
	t     *testing.T
	sw    string
	hosts []string
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	tag := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(t.Name(), ""))
	if len(tag) > 20 {
		tag = tag[len(tag)-20:]
	}
	prefix := fmt.Sprintf("ddpt%d-%s", os.Getpid(), tag)
	c := &cluster{t: t, sw: prefix + "-sw"}
	t.Cleanup(func() {
		for _, ns := range append([]string{c.sw}, c.hosts...) {
			killNS(ns)
			exec.Command("ip", "netns", "delete", ns).Run()
		}
	})
	ip(t, "netns", "add", c.sw)
	ip(t, "-n", c.sw, "link", "add", "br0", "type", "bridge")
	ip(t, "-n", c.sw, "link", "set", "br0", "up")
	for i := range n {
		h := fmt.Sprintf("%s-h%d", prefix, i)
		c.hosts = append(c.hosts, h)
		ip(t, "netns", "add", h)
		ip(t, "-n", h, "link", "set", "lo", "up")
		// veth: eth0 in the host, p<i> on the switch's bridge.
		ip(t, "-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", fmt.Sprintf("p%d", i), "netns", c.sw)
		ip(t, "-n", h, "addr", "add", fmt.Sprintf("10.77.0.%d/24", i+1), "dev", "eth0")
		ip(t, "-n", h, "link", "set", "eth0", "up")
		ip(t, "-n", c.sw, "link", "set", fmt.Sprintf("p%d", i), "master", "br0")
		ip(t, "-n", c.sw, "link", "set", fmt.Sprintf("p%d", i), "up")
	}
	return c
}

func (c *cluster) addr(i int) string { return fmt.Sprintf("10.77.0.%d", i+1) }

// cut takes host i's link down on the switch side: its packets go nowhere, nothing is reset.
func (c *cluster) cut(i int) { ip(c.t, "-n", c.sw, "link", "set", fmt.Sprintf("p%d", i), "down") }

// partition moves the switch ports of hosts to a second bridge: they still reach each other, and
// no longer the rest; nothing is reset. heal moves them back.
func (c *cluster) partition(hosts ...int) {
	if out, _ := execOut("ip", "-n", c.sw, "link", "show", "br1"); out == "" {
		ip(c.t, "-n", c.sw, "link", "add", "br1", "type", "bridge")
		ip(c.t, "-n", c.sw, "link", "set", "br1", "up")
	}
	for _, i := range hosts {
		ip(c.t, "-n", c.sw, "link", "set", fmt.Sprintf("p%d", i), "master", "br1")
	}
}

func (c *cluster) heal(hosts ...int) {
	for _, i := range hosts {
		ip(c.t, "-n", c.sw, "link", "set", fmt.Sprintf("p%d", i), "master", "br0")
	}
}

// proc is one ddplaunch running in a host namespace.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
	err  error
	end  time.Time
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func (c *cluster) launch(e env, i int, extra ...string) *proc {
	c.t.Helper()
	args := []string{"netns", "exec", c.hosts[i], filepath.Join(e.bin, "ddplaunch"),
		"--nproc-per-node", "2", "--join", c.addr(0) + ":7946", "--bind", c.addr(i) + ":7946",
		"--gossip", "local", "--rdzv-id", "netns", "--rdzv-timeout", "20s", "--rdzv-last-call", "1s",
		"--grace", "2s", "--cluster-key-file", e.key}
	return c.start(append(args, extra...))
}

// start runs `ip ARGS...` (netns exec HOST ddplaunch ...) in its own process group; the test's
// cleanup kills the group.
func (c *cluster) start(args []string) *proc {
	c.t.Helper()
	cmd := exec.Command("ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{cmd: cmd, out: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); p.end = time.Now(); close(p.done) }()
	c.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("ddplaunch still running after %v; output:\n%s", d, p.out.String())
		return nil
	}
}

// trainArgs: a small MLP; global batch 384 = 32 × accum × world for worlds 2, 4 and 6.
func trainArgs(e env, steps int, ckpt string) []string {
	return []string{"--config", e.config,
		"--set", "model.widths=[784,64,10]", "--set", "train.max_steps=" + strconv.Itoa(steps),
		"--set", "train.micro_batch=32", "--set", "train.global_batch=384", "--set", "train.log_every=10",
		"--set", "train.eval_batches=20", "--set", "checkpoint.dir=" + ckpt, "--set", "checkpoint.every=10",
		"--set", "data.workers=1"}
}

var (
	shaRe = regexp.MustCompile(`msg=done rank=(\d+) .*eval_accuracy=([0-9.]+) param_sha256=([0-9a-f]+)`)
)

// results returns rank → (accuracy, sha prefix) from "done" lines.
func results(outs ...string) map[int][2]string {
	r := map[int][2]string{}
	for _, o := range outs {
		sc := bufio.NewScanner(strings.NewReader(o))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := shaRe.FindStringSubmatch(sc.Text()); m != nil {
				rank, _ := strconv.Atoi(m[1])
				r[rank] = [2]string{m[2], m[3]}
			}
		}
	}
	return r
}

func waitCheckpoint(t *testing.T, dir string, step int, p ...*proc) {
	t.Helper()
	want := filepath.Join(dir, fmt.Sprintf("step-%08d", step))
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(want); err == nil {
			return
		}
		for _, q := range p {
			select {
			case <-q.done:
				t.Fatalf("a launcher ended before checkpoint %d: %v\n%s", step, q.err, q.out.String())
			default:
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no checkpoint %s within 90s", want)
}

func singleHost(t *testing.T, e env, steps int) [2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--nproc-per-node", "2"}, trainArgs(e, steps, t.TempDir())...)
	out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "ddplaunch"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("single-host run: %v\n%s", err, out)
	}
	return results(string(out))[0]
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}
