package launcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The assignment is a pure function of the flags: node R's ranks are R·nproc .., the master is
// the one given, the token the same on every host for an attempt.
func TestStaticConfig_assignment(t *testing.T) {
	key := []byte("0123456789abcdef")
	for _, tt := range []struct {
		name              string
		cfg               StaticConfig
		attempt           int
		offset, world, nn int
	}{
		{"node 0 of 2, 2 each", StaticConfig{NNodes: 2, NodeRank: 0, NProc: 2, MasterAddr: "10.0.0.1", MasterPort: 29500}, 0, 0, 4, 2},
		{"node 1 of 2, 2 each", StaticConfig{NNodes: 2, NodeRank: 1, NProc: 2, MasterAddr: "10.0.0.1", MasterPort: 29500}, 0, 2, 4, 2},
		{"node 2 of 3, 8 each", StaticConfig{NNodes: 3, NodeRank: 2, NProc: 8, MasterAddr: "h0", MasterPort: 1}, 1, 16, 24, 3},
		{"one host", StaticConfig{NNodes: 1, NodeRank: 0, NProc: 4, MasterAddr: "127.0.0.1", MasterPort: 29400}, 0, 0, 4, 1},
	} {
		tt.cfg.Job, tt.cfg.Key = "job", key
		a := tt.cfg.Assignment(tt.attempt)
		if a.NodeRank != tt.cfg.NodeRank || a.NNodes != tt.nn || a.RankOffset != tt.offset || a.WorldSize != tt.world ||
			a.MasterAddr != tt.cfg.MasterAddr || a.MasterPort != tt.cfg.MasterPort || a.Lost != nil {
			t.Errorf("%s: %+v, want offset %d world %d nnodes %d", tt.name, a, tt.offset, tt.world, tt.nn)
		}
		if a.Token != StaticToken(key, "job", tt.attempt) {
			t.Errorf("%s: token %s, want StaticToken", tt.name, a.Token)
		}
	}
	for _, bad := range []StaticConfig{
		{NNodes: 2, NodeRank: 2, NProc: 1, MasterAddr: "h", MasterPort: 1},
		{NNodes: 2, NodeRank: -1, NProc: 1, MasterAddr: "h", MasterPort: 1},
		{NNodes: 2, NodeRank: 0, NProc: 0, MasterAddr: "h", MasterPort: 1},
		{NNodes: 2, NodeRank: 0, NProc: 1, MasterPort: 1},
		{NNodes: 2, NodeRank: 0, NProc: 1, MasterAddr: "h"},
	} {
		var ce *ConfigError
		if _, err := NewStaticRendezvous(bad); !errors.As(err, &ce) {
			t.Errorf("NewStaticRendezvous(%+v): %v, want a *ConfigError", bad, err)
		}
	}
}

// Attempt 0's token is the gossip rendezvous's (DeriveToken); every restart has its own, and
// another key or job gives another one.
func TestStaticToken(t *testing.T) {
	k := []byte("0123456789abcdef")
	seen := map[string]string{}
	for _, c := range []struct {
		key     []byte
		job     string
		attempt int
	}{{k, "j", 0}, {k, "j", 1}, {k, "j", 2}, {nil, "j", 0}, {k, "j2", 0}, {k, "j2", 1}} {
		tok := StaticToken(c.key, c.job, c.attempt)
		name := string(c.key) + "|" + c.job + "|" + strconv.Itoa(c.attempt)
		if o, dup := seen[tok]; dup {
			t.Errorf("%s and %s share a token", name, o)
		}
		seen[tok] = name
	}
	if StaticToken(k, "j", 0) != DeriveToken(k, "j") {
		t.Error("attempt 0's token is not DeriveToken's, the gossip rendezvous's")
	}
	if a, b := StaticToken(k, "j", 3), StaticToken(slices.Clone(k), "j", 3); a != b {
		t.Errorf("two hosts compute %s and %s for one attempt", a, b)
	}
}

// Node rank 0 never waits; a higher node rank tries the master until it answers.
func TestStaticRendezvous_waitsForTheMaster(t *testing.T) {
	var tries atomic.Int32
	dial := func(ctx context.Context, addr string) error {
		if addr != "10.0.0.1:29500" {
			t.Errorf("dialled %s", addr)
		}
		if tries.Add(1) < 4 {
			return errors.New("connection refused")
		}
		return nil
	}
	cfg := StaticConfig{NNodes: 2, NProc: 2, MasterAddr: "10.0.0.1", MasterPort: 29500, Job: "j",
		Timeout: 10 * time.Second, Retry: time.Millisecond, Dial: dial, Logger: quietLog()}
	r0, _ := NewStaticRendezvous(cfg)
	if a, err := r0.Next(context.Background(), 0); err != nil || a.RankOffset != 0 || tries.Load() != 0 {
		t.Fatalf("node 0: %+v %v after %d tries, want no wait", a, err, tries.Load())
	}
	cfg.NodeRank = 1
	r1, _ := NewStaticRendezvous(cfg)
	a, err := r1.Next(context.Background(), 0)
	if err != nil || a.RankOffset != 2 || a.WorldSize != 4 || tries.Load() != 4 {
		t.Fatalf("node 1: %+v %v after %d tries, want ranks from 2 of 4 after the 4th try", a, err, tries.Load())
	}
}

// A master that never answers: the error names it, this host's node rank and the timeout.
func TestStaticRendezvous_masterUnreachable(t *testing.T) {
	refused := errors.New("dial tcp 10.0.0.9:29500: connect: connection refused")
	r, _ := NewStaticRendezvous(StaticConfig{NNodes: 3, NodeRank: 2, NProc: 1, MasterAddr: "10.0.0.9", MasterPort: 29500,
		Timeout: 50 * time.Millisecond, Retry: 5 * time.Millisecond, Logger: quietLog(),
		Dial: func(context.Context, string) error { return refused }})
	start := time.Now()
	_, err := r.Next(context.Background(), 0)
	var mu *MasterUnreachableError
	if !errors.As(err, &mu) || !errors.Is(err, refused) || time.Since(start) > 5*time.Second {
		t.Fatalf("Next: %v after %v, want a *MasterUnreachableError wrapping the dial error", err, time.Since(start))
	}
	for _, want := range []string{"node rank 2", "10.0.0.9:29500", "50ms", "connection refused", "--node-rank 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if ExitCode(err) != ExitFailure {
		t.Errorf("exit code %d, want %d", ExitCode(err), ExitFailure)
	}
}

// The end of ctx (a signal to the launcher) ends the wait at once.
func TestStaticRendezvous_ctxEndsTheWait(t *testing.T) {
	r, _ := NewStaticRendezvous(StaticConfig{NNodes: 2, NodeRank: 1, NProc: 1, MasterAddr: "h", MasterPort: 1,
		Timeout: time.Hour, Retry: time.Millisecond, Logger: quietLog(),
		Dial: func(context.Context, string) error { return errors.New("no") }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := r.Next(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: %v, want ctx's error", err)
	}
}

// The default dialer against a real listener that appears late.
func TestStaticRendezvous_tcp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens for now
	r, _ := NewStaticRendezvous(StaticConfig{NNodes: 2, NodeRank: 1, NProc: 1, MasterAddr: "127.0.0.1", MasterPort: port,
		Timeout: 20 * time.Second, Retry: 20 * time.Millisecond, Logger: quietLog()})
	done := make(chan error, 1)
	go func() { _, err := r.Next(context.Background(), 0); done <- err }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Next returned %v before the master listened", err)
	default:
	}
	l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", port, err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return once the master listened")
	}
}
