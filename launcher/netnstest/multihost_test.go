package netnstest

import (
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/launcher"
)

const steps = 60

// Three hosts, 2 workers each: 6 ranks train like the single-host run, every rank ends with the
// same parameters, and a fourth host with the wrong cluster key and a fifth with none are refused
// meanwhile.
func TestNetns_threeHostsTrain(t *testing.T) {
	e := requireNetns(t)
	t0 := time.Now()
	base := singleHost(t, e, steps)
	t.Logf("single host (2 workers): accuracy %s, param_sha256 %s (%v)", base[0], base[1], time.Since(t0).Round(time.Millisecond))

	c := newCluster(t, 5)
	ckpt := t.TempDir()
	t0 = time.Now()
	var ps []*proc
	for i := range 3 {
		ps = append(ps, c.launch(e, i, append([]string{"--nnodes", "3"}, trainArgs(e, steps, ckpt)...)...))
	}
	bad := c.launch(e, 3, append([]string{"--nnodes", "3", "--cluster-key-file", e.badKey, "--rdzv-timeout", "20s"}, trainArgs(e, steps, t.TempDir())...)...)
	// And one with no key at all (no --cluster-key-file, no $DDP_CLUSTER_KEY): gossip in the clear.
	none := c.launch(e, 4, append([]string{"--nnodes", "3", "--cluster-key-file", "", "--rdzv-timeout", "20s"}, trainArgs(e, steps, t.TempDir())...)...)
	if err := bad.wait(t, 40*time.Second); err == nil || !strings.Contains(bad.out.String(), "cluster key") {
		t.Errorf("the wrong-key host: exit %v, want non-zero naming the cluster key:\n%s", err, bad.out.String())
	}
	if err := none.wait(t, 40*time.Second); err == nil || !strings.Contains(none.out.String(), "cluster key") ||
		!strings.Contains(none.out.String(), "NO CLUSTER KEY") || strings.Contains(none.out.String(), "starting workers") {
		t.Errorf("the host without a key: exit %v, want non-zero naming the cluster key, having started nothing:\n%s", err, tail(none.out.String()))
	}
	var outs []string
	for i, p := range ps {
		if err := p.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("host %d: %v\n%s", i, err, p.out.String())
		}
		outs = append(outs, p.out.String())
	}
	t.Logf("3 hosts × 2 workers: %v", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(strings.Join(outs, ""), "refus") && !strings.Contains(strings.Join(outs, ""), "cluster key") {
		t.Errorf("no host of the job logged the wrong-key host's refusal")
	}
	res := results(outs...)
	if len(res) != 6 {
		t.Fatalf("%d ranks reported, want 6:\n%s", len(res), strings.Join(outs, "\n"))
	}
	for r, v := range res {
		if v[1] != res[0][1] {
			t.Errorf("rank %d param_sha256 %s, rank 0 %s", r, v[1], res[0][1])
		}
	}
	acc, _ := strconv.ParseFloat(res[0][0], 64)
	want, _ := strconv.ParseFloat(base[0], 64)
	// Same global batch, same data order: the same training up to float rounding in the sums.
	if math.Abs(acc-want) > 0.01 {
		t.Errorf("6-rank accuracy %.4f, single host %.4f: want within 0.01", acc, want)
	}
	t.Logf("6 ranks: accuracy %.4f (single host %.4f), param_sha256 %s on every rank", acc, want, res[0][1])
}

// failureBound is how long survivors may take, from a host's death to their own exit: the
// documented detection bound, the workers' grace period, and slack for a loaded 2-core machine.
func failureBound() time.Duration {
	return launcher.DefaultLocalClusterConfig().DetectionBound(3) + 2*time.Second + 10*time.Second
}

// Kill one host's launcher and workers mid-run: the others exit non-zero naming it.
func TestNetns_killHostFails(t *testing.T) {
	e := requireNetns(t)
	c := newCluster(t, 3)
	ckpt := t.TempDir()
	var ps []*proc
	for i := range 3 {
		ps = append(ps, c.launch(e, i, append([]string{"--nnodes", "3"}, trainArgs(e, 2000, ckpt)...)...))
	}
	waitCheckpoint(t, ckpt, 20, ps...)
	kill := time.Now()
	syscall.Kill(-ps[2].cmd.Process.Pid, syscall.SIGKILL)
	victim := "@" + c.addr(2) + ":7946"
	for i := range 2 {
		err := ps[i].wait(t, failureBound()+30*time.Second)
		took := ps[i].end.Sub(kill)
		out := ps[i].out.String()
		if err == nil || !strings.Contains(out, "membership lost") || !strings.Contains(out, victim) {
			t.Errorf("host %d: exit %v, want non-zero naming %s:\n%s", i, err, victim, tail(out))
		}
		if took > failureBound() {
			t.Errorf("host %d exited %v after the kill, bound %v", i, took, failureBound())
		}
		t.Logf("host %d exited %v after the kill (bound %v): %s", i, took.Round(time.Millisecond), failureBound(), lastLine(out, "membership lost"))
	}
	c.noProcessLeft()
}

// --nnodes 2:3 --max-restarts 1: after a host is killed, or its link is cut, the two others
// re-rendezvous and finish from the last checkpoint with 4 ranks.
func TestNetns_elasticRestart(t *testing.T) {
	for _, how := range []string{"kill", "cut"} {
		t.Run(how, func(t *testing.T) {
			e := requireNetns(t)
			c := newCluster(t, 3)
			ckpt := t.TempDir()
			var ps []*proc
			for i := range 3 {
				ps = append(ps, c.launch(e, i, append([]string{"--nnodes", "2:3", "--max-restarts", "1"}, trainArgs(e, 200, ckpt)...)...))
			}
			waitCheckpoint(t, ckpt, 20, ps...)
			t0 := time.Now()
			if how == "kill" {
				syscall.Kill(-ps[2].cmd.Process.Pid, syscall.SIGKILL)
			} else {
				c.cut(2)
			}
			var outs []string
			for i := range 2 {
				if err := ps[i].wait(t, 3*time.Minute); err != nil {
					t.Fatalf("host %d: %v\n%s", i, err, tail(ps[i].out.String()))
				}
				out := ps[i].out.String()
				outs = append(outs, out)
				if !strings.Contains(out, "resumed from checkpoint") && i == 0 {
					t.Errorf("host %d: no resume from a checkpoint:\n%s", i, tail(out))
				}
			}
			t.Logf("survivors finished %v after the %s", time.Since(t0).Round(time.Millisecond), how)
			res := results(outs...)
			if len(res) != 4 {
				t.Fatalf("%d ranks finished, want 4 (two hosts)", len(res))
			}
			for r, v := range res {
				if v[1] != res[0][1] {
					t.Errorf("rank %d param_sha256 %s, rank 0 %s", r, v[1], res[0][1])
				}
			}
			if how == "cut" {
				// The cut-off host sees the others die and is a minority of the round that ran:
				// it stops at once (split brain), not after --rdzv-timeout.
				err := ps[2].wait(t, 2*time.Minute)
				if err == nil || !strings.Contains(ps[2].out.String(), "split brain") {
					t.Errorf("the cut-off host: exit %v, want non-zero saying split brain:\n%s", err, tail(ps[2].out.String()))
				}
				t.Logf("cut-off host: %v: %s", err, lastLine(ps[2].out.String(), "ddplaunch:"))
			}
			c.noProcessLeft()
		})
	}
}

// Issue 22, item 4: a temporary partition cuts a running job of three hosts (--nnodes 2:3
// --max-restarts 1) into {h0, h1} and {h2, h3}, where h3 is a late fourth host waiting to get in.
// Each side has MIN hosts, but only h0 and h1 are a majority of the round that ran: they restart
// and finish on two hosts, while h2 and h3 refuse to go on (split brain) instead of resuming the
// job a second time in the same checkpoint.dir. The partition heals after they stopped.
func TestNetns_partitionMinorityStops(t *testing.T) {
	e := requireNetns(t)
	c := newCluster(t, 4)
	ckpt := t.TempDir()
	// 600 steps: the job must still run when the partition comes (after h3 joined, a second
	// later); 200 steps ended first on an idle machine (2.2 s of training).
	args := append([]string{"--nnodes", "2:3", "--max-restarts", "1"}, trainArgs(e, 600, ckpt)...)
	var ps []*proc
	for i := range 3 {
		ps = append(ps, c.launch(e, i, args...))
	}
	waitCheckpoint(t, ckpt, 20, ps...)
	ps = append(ps, c.launch(e, 3, args...))
	waitOutput(t, ps[3], "joined the cluster", 30*time.Second)
	time.Sleep(time.Second) // its rendezvous steps see the round that runs
	c.partition(2, 3)
	t0 := time.Now()
	minority := map[int]string{}
	for _, i := range []int{2, 3} {
		err := ps[i].wait(t, 90*time.Second)
		out := ps[i].out.String()
		minority[i] = out
		if err == nil || !strings.Contains(out, "split brain") || !strings.Contains(out, "--allow-minority") {
			t.Errorf("minority host h%d: exit %v, want non-zero saying split brain:\n%s", i, err, tail(out))
		}
		t.Logf("h%d stopped %v after the partition: %s", i, ps[i].end.Sub(t0).Round(time.Millisecond), lastLine(out, "split brain"))
	}
	if strings.Contains(minority[2], "restart=1") || strings.Contains(minority[3], "starting workers") {
		t.Errorf("a minority host started workers after the partition:\nh2:\n%s\nh3:\n%s", tail(minority[2]), tail(minority[3]))
	}
	c.heal(2, 3)
	var outs []string
	for i := range 2 {
		if err := ps[i].wait(t, 3*time.Minute); err != nil {
			t.Fatalf("majority host h%d: %v\n%s", i, err, tail(ps[i].out.String()))
		}
		outs = append(outs, ps[i].out.String())
	}
	t.Logf("the majority finished %v after the partition", time.Since(t0).Round(time.Millisecond))
	res := results(outs...)
	if len(res) != 4 {
		t.Fatalf("%d ranks finished, want 4 (h0 and h1)", len(res))
	}
	for r, v := range res {
		if v[1] != res[0][1] {
			t.Errorf("rank %d param_sha256 %s, rank 0 %s", r, v[1], res[0][1])
		}
	}
	c.noProcessLeft()
}

// waitOutput waits until p's output contains s.
func waitOutput(t *testing.T, p *proc, s string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); !strings.Contains(p.out.String(), s); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %q within %v:\n%s", s, d, tail(p.out.String()))
		}
	}
}

func (c *cluster) noProcessLeft() {
	c.t.Helper()
	time.Sleep(200 * time.Millisecond)
	for _, h := range c.hosts {
		out, _ := execOut("ip", "netns", "pids", h)
		if strings.TrimSpace(out) != "" {
			c.t.Errorf("processes left in %s: %s", h, out)
		}
	}
}

func tail(s string) string {
	l := strings.Split(s, "\n")
	if len(l) > 40 {
		l = l[len(l)-40:]
	}
	return strings.Join(l, "\n")
}

func lastLine(s, with string) string {
	l := strings.Split(s, "\n")
	for i := len(l) - 1; i >= 0; i-- {
		if strings.Contains(l[i], with) {
			return l[i]
		}
	}
	return ""
}

var _ = os.Getpid
