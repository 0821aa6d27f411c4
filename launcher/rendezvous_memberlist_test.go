package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run real memberlist members on 127.0.0.1 (one port each) with the local preset.

func freeGossipPort(t *testing.T) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768–60999 on Linux): a port the kernel handed out for
	// ":0" is also what it hands other processes' outgoing connections, and one of those took a
	// port between this check and memberlist's bind once (make test, session 19). A random port
	// here is free of that; the TCP and UDP checks catch the rest.
	for range 200 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err == nil {
			u.Close()
			return p
		}
	}
	t.Fatal("no free port for gossip in 20000–31999")
	return 0
}

// logBuf collects log lines from several goroutines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *logBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newTestRdzv(t *testing.T, port int, join []int, mod func(*MemberlistConfig), log io.Writer) *MemberlistRendezvous {
	t.Helper()
	var js []string
	for _, j := range join {
		js = append(js, fmt.Sprintf("127.0.0.1:%d", j))
	}
	if log == nil {
		log = io.Discard
	}
	cfg := MemberlistConfig{
		Job: "test", MinNodes: 3, MaxNodes: 3, NodeRank: -1, NProc: 2, ConfigHash: "abc",
		Bind: fmt.Sprintf("127.0.0.1:%d", port), Join: js, Key: []byte("0123456789abcdef"),
		Cluster: DefaultLocalClusterConfig(), RdzvTimeout: 8 * time.Second, LastCall: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewMemberlistRendezvous(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func nextAll(t *testing.T, rs []*MemberlistRendezvous, attempt int) []Assignment {
	t.Helper()
	out := make([]Assignment, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out[i], errs[i] = r.Next(ctx, attempt)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}
	return out
}

func TestMemberlistRendezvous_threeHostsAgree(t *testing.T) {
	p := []int{freeGossipPort(t), freeGossipPort(t), freeGossipPort(t)}
	var lg logBuf
	rs := []*MemberlistRendezvous{
		newTestRdzv(t, p[0], []int{p[0]}, nil, &lg),
		newTestRdzv(t, p[1], []int{p[0]}, nil, &lg),
		newTestRdzv(t, p[2], []int{p[0], p[1]}, nil, &lg),
	}
	defer func() {
		if t.Failed() {
			t.Log(lg.String())
		}
	}()
	as := nextAll(t, rs, 0)
	seen := map[int]bool{}
	for i, a := range as {
		if a.NNodes != 3 || a.WorldSize != 6 || a.RankOffset != 2*a.NodeRank {
			t.Errorf("host %d: %+v", i, a)
		}
		if a.MasterAddr != as[0].MasterAddr || a.MasterPort != as[0].MasterPort || a.Token != as[0].Token {
			t.Errorf("host %d disagrees on master/token: %+v vs %+v", i, a, as[0])
		}
		seen[a.NodeRank] = true
	}
	if len(seen) != 3 {
		t.Errorf("node ranks %v, want 0,1,2 once each", seen)
	}
	if as[0].Token != DeriveToken([]byte("0123456789abcdef"), "test") {
		t.Errorf("token is not derived from the key")
	}

	// Host 2 leaves cleanly: the others' Lost names it at once.
	start := time.Now()
	rs[2].Close()
	for i := range 2 {
		select {
		case err := <-as[i].Lost:
			var hl *HostLostError
			if !errors.As(err, &hl) || !hl.Left || !strings.Contains(err.Error(), rs[2].Name()) {
				t.Errorf("host %d: Lost = %v, want a HostLostError (left) naming %s", i, err, rs[2].Name())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("host %d: no Lost within 5s of a clean leave", i)
		}
	}
	t.Logf("clean leave noticed in %v", time.Since(start))
}

func TestMemberlistRendezvous_elasticShrink(t *testing.T) {
	p := []int{freeGossipPort(t), freeGossipPort(t), freeGossipPort(t)}
	mod := func(c *MemberlistConfig) { c.MinNodes = 2 }
	var lg logBuf
	rs := []*MemberlistRendezvous{
		newTestRdzv(t, p[0], []int{p[0]}, mod, &lg),
		newTestRdzv(t, p[1], []int{p[0]}, mod, &lg),
		newTestRdzv(t, p[2], []int{p[0]}, mod, &lg),
	}
	defer func() {
		if t.Failed() {
			t.Log(lg.String())
		}
	}()
	as := nextAll(t, rs, 0)
	if as[0].NNodes != 3 {
		t.Fatalf("first round: %d hosts, want 3", as[0].NNodes)
	}
	// Host 1 dies without a word (Shutdown, no Leave): the others declare it dead.
	victim := rs[1]
	start := time.Now()
	victim.closeOnce.Do(func() { close(victim.stopJoin); victim.ml.Shutdown() }) // no Leave: a crash
	bound := DefaultLocalClusterConfig().DetectionBound(3)
	for _, i := range []int{0, 2} {
		select {
		case err := <-as[i].Lost:
			var hl *HostLostError
			if !errors.As(err, &hl) || hl.Left || !strings.Contains(err.Error(), victim.Name()) {
				t.Errorf("host %d: Lost = %v, want dead %s", i, err, victim.Name())
			}
		case <-time.After(bound + 3*time.Second):
			t.Fatalf("host %d: no Lost within %v", i, bound+3*time.Second)
		}
	}
	t.Logf("death noticed in %v (bound %v)", time.Since(start), bound)
	for _, i := range []int{0, 2} {
		rs[i].ReportEnd(0, errors.New("ring broke"))
		if err := rs[i].ExplainFailure(context.Background(), 0); err == nil || !strings.Contains(err.Error(), victim.Name()) {
			t.Errorf("host %d: ExplainFailure = %v, want the dead host", i, err)
		}
	}
	as2 := nextAll(t, []*MemberlistRendezvous{rs[0], rs[2]}, 1)
	if as2[0].NNodes != 2 || as2[0].WorldSize != 4 || as2[0].NodeRank == as2[1].NodeRank {
		t.Fatalf("second round: %+v %+v", as2[0], as2[1])
	}
	// Survivors keep their relative order.
	if (as[0].NodeRank < as[2].NodeRank) != (as2[0].NodeRank < as2[1].NodeRank) {
		t.Errorf("survivors' node ranks %d, %d became %d, %d: order not kept", as[0].NodeRank, as[2].NodeRank, as2[0].NodeRank, as2[1].NodeRank)
	}
}

func TestMemberlistRendezvous_refusals(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(*MemberlistConfig)
		wantA string // in the refused host's error
	}{
		{"config hash", func(c *MemberlistConfig) { c.ConfigHash = "def" }, "config/model hash"},
		{"nproc", func(c *MemberlistConfig) { c.NProc = 3 }, "--nproc-per-node"},
		{"duplicate node rank", func(c *MemberlistConfig) { c.NodeRank = 0 }, "node rank 0"},
		{"wrong key", func(c *MemberlistConfig) { c.Key = []byte("fedcba9876543210") }, "key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := []int{freeGossipPort(t), freeGossipPort(t)}
			var seedLog, badLog logBuf
			newTestRdzv(t, p[0], nil, func(c *MemberlistConfig) { c.NodeRank = 0 }, &seedLog)
			bad := newTestRdzv(t, p[1], []int{p[0]}, func(c *MemberlistConfig) {
				tc.mod(c)
				c.RdzvTimeout = 3 * time.Second
			}, &badLog)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := bad.Next(ctx, 0)
			if err == nil || !strings.Contains(err.Error(), tc.wantA) {
				t.Fatalf("refused host: Next = %v, want an error about %q", err, tc.wantA)
			}
			t.Logf("refused host says: %v", err)
			deadline := time.Now().Add(3 * time.Second)
			for !strings.Contains(seedLog.String(), "refus") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(seedLog.String(), "refus") {
				t.Errorf("the cluster's host logged no refusal:\n%s", seedLog.String())
			}
		})
	}
}
