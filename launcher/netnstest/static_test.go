package netnstest

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// launchStatic runs ddplaunch on host i with torchrun's static rendezvous: --nnodes n, this
// host's node rank, and host 0's address as --master-addr; no gossip flag at all.
func (c *cluster) launchStatic(e env, i, n int, extra ...string) *proc {
	c.t.Helper()
	args := []string{"netns", "exec", c.hosts[i], filepath.Join(e.bin, "ddplaunch"),
		"--nnodes", strconv.Itoa(n), "--node_rank", strconv.Itoa(i), "--master_addr", c.addr(0), "--master_port", "29500",
		"--nproc_per_node", "2", "--grace", "2s", "--cluster_key_file", e.key}
	return c.start(append(args, extra...))
}

// Two hosts, 2 workers each, over torchrun's static rendezvous (--master-addr, --node-rank): the
// 4 ranks train like the single-host run and end with the same parameters. Host 1 starts first
// and waits for the master.
func TestNetns_staticTwoHosts(t *testing.T) {
	e := requireNetns(t)
	base := singleHost(t, e, steps)
	c := newCluster(t, 2)
	ckpt := t.TempDir()
	t0 := time.Now()
	h1 := c.launchStatic(e, 1, 2, append([]string{"--rdzv-timeout", "60s"}, trainArgs(e, steps, ckpt)...)...)
	time.Sleep(time.Second)
	h0 := c.launchStatic(e, 0, 2, trainArgs(e, steps, ckpt)...)
	var outs []string
	for i, p := range []*proc{h0, h1} {
		if err := p.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("host %d: %v\n%s", i, err, tail(p.out.String()))
		}
		outs = append(outs, p.out.String())
	}
	t.Logf("2 hosts × 2 workers, static rendezvous: %v", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(outs[1], "waiting for the master") || !strings.Contains(outs[1], "static rendezvous node_rank=1") {
		t.Errorf("host 1 did not wait for the master:\n%s", tail(outs[1]))
	}
	res := results(outs...)
	if len(res) != 4 {
		t.Fatalf("%d ranks reported, want 4:\n%s", len(res), strings.Join(outs, "\n"))
	}
	for r, v := range res {
		if v[1] != res[0][1] {
			t.Errorf("rank %d param_sha256 %s, rank 0 %s", r, v[1], res[0][1])
		}
	}
	acc, _ := strconv.ParseFloat(res[0][0], 64)
	want, _ := strconv.ParseFloat(base[0], 64)
	if math.Abs(acc-want) > 0.01 {
		t.Errorf("4-rank accuracy %.4f, single host %.4f: want within 0.01", acc, want)
	}
	t.Logf("4 ranks: accuracy %.4f (single host %.4f), param_sha256 %s on every rank", acc, want, res[0][1])
}

// A host whose master does not answer (its link is cut: the connection attempts time out rather
// than being refused) fails within --rdzv-timeout, naming the master, and starts no worker.
func TestNetns_staticMasterUnreachable(t *testing.T) {
	e := requireNetns(t)
	c := newCluster(t, 2)
	c.cut(0)
	t0 := time.Now()
	h1 := c.launchStatic(e, 1, 2, "--rdzv-timeout", "3s", "sh", "-c", "echo worker started")
	err := h1.wait(t, 30*time.Second)
	out := h1.out.String()
	if err == nil || !strings.Contains(out, "node rank 1 could not reach the master "+c.addr(0)+":29500") ||
		strings.Contains(out, "worker started") {
		t.Errorf("exit %v after %v, want non-zero naming the master and no worker:\n%s", err, time.Since(t0), out)
	}
	if took := time.Since(t0); took > 15*time.Second {
		t.Errorf("took %v with --rdzv-timeout 3s", took)
	}
}
