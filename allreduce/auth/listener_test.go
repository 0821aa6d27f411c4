package auth

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/internal/memnet"
	"github.com/goddp/goddp/allreduce/link"
)

// The listener and the gRPC dialler on an in-memory network (bufconn): the handshake is the
// test, not the sockets. A dialler with the token gets through and its rank comes with the
// connection; one with another token is refused on both sides, at once, and the refusal is
// logged; the listener hands gRPC only the first.
func TestListener_overMemnet(t *testing.T) {
	mn := memnet.New()
	const addr = "127.0.0.1:29500"
	rec := &leaftest.RecordingHandler{}
	server := link.Config{Rank: 0, WorldSize: 3, Token: "tok", Timeout: 5 * time.Second, GRPCListen: mn.Listen, GRPCDial: mn.Dial}
	raw, err := server.ListenGRPC("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	lis := NewListener(raw, server, slog.New(rec))
	defer lis.Close()

	client := func(rank int, token string) link.Config {
		return link.Config{Rank: rank, WorldSize: 3, Token: token, Timeout: 5 * time.Second, GRPCListen: mn.Listen, GRPCDial: mn.Dial}
	}
	start := time.Now()
	if _, err := DialGRPC(context.Background(), addr, client(2, "other"), nil); !errors.Is(err, ErrListener) {
		t.Fatalf("another token: %v, want %v", err, ErrListener)
	}
	c, err := DialGRPC(context.Background(), addr, client(2, "tok"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if a, ok := got.RemoteAddr().(Addr); !ok || a.rank != 2 {
		t.Fatalf("accepted connection from %v, want rank 2's", got.RemoteAddr())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the handshakes took %v", d)
	}
	// The listener logs after its answer, which the refused dialler may read first.
	for deadline := time.Now().Add(5 * time.Second); !rec.Has("wrong or missing token"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("refusal not logged: %v", rec.Msgs())
		}
	}
}
