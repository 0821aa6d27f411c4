package auth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/link"
)

// A dial whose peer accepted and never answers the handshake returns as soon as its context
// is cancelled, with the context's error, not after the handshake's Deadline (10 s) or the
// group's timeout: an aborting rank's abort frame to a frozen peer no longer holds it there.
func TestDialGRPC_silentPeerTakesTheContext(t *testing.T) {
	addr, hello := leaftest.SilentPeer(t, helloSize)
	cfg := link.Config{Rank: 1, WorldSize: 2, Token: "tok", Timeout: time.Minute, GRPCNoUnix: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		c, err := DialGRPC(ctx, addr, cfg, nil)
		if c != nil {
			c.Close()
		}
		errc <- err
	}()
	leaftest.CancelAfterHello(t, hello, cancel, errc, HelloDeadline, "the handshake")
}

// Closing a listener ends the handshakes in progress at once: a dialler that sent its hello
// and then stalls (a frozen peer, or a flood that sends hellos) held Close until the
// handshake's Deadline (10 s) before.
func TestListener_closeEndsStalledHandshakes(t *testing.T) {
	pl := newPipeListener()
	cfg := link.Config{Rank: 0, WorldSize: 2, Token: "tok", Timeout: time.Minute}
	lis := NewListener(pl, cfg, slog.New(&leaftest.RecordingHandler{}))
	c := pl.dial(t, "10.0.0.2", 50000)
	defer c.Close()
	// The hello, then nothing: the listener answers with its nonce and MAC and waits for the proof.
	hello := append([]byte(magic), make([]byte, helloSize-len(magic))...)
	hello[len(magic)] = PlaneGRPC
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, nonceSize+macSize)); err != nil {
		t.Fatalf("the listener's answer to the hello: %v", err)
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() { lis.Close(); close(closed) }()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(start))
	case <-time.After(HelloDeadline):
		t.Fatalf("Close waited more than %v for a stalled handshake", HelloDeadline)
	}
}

// A handshake during which the context ended fails, even when the handshake itself got through:
// the context's goroutine moves the connection's deadline to the past at a moment of its own, so
// such a connection could fail its first write after the caller cleared the deadline, leaving
// the peer (which took it as this rank's stream) waiting on it for its whole timeout. Cancelling
// at varied points of the handshake, a DialContext that returns nil must leave a connection whose
// next write goes through; otherwise it returns the context's error.
func TestDialContext_cancelledMidwayFails(t *testing.T) {
	cfg := link.Config{Rank: 0, WorldSize: 2}
	ok, failed := 0, 0
	for i := range 1000 {
		a, b := net.Pipe()
		a.SetDeadline(time.Now().Add(5 * time.Second))
		b.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			defer b.Close()
			if rank, world, err := Accept(b, "tok", PlaneTCP, 5*time.Second); err == nil && Reply(b, CheckPeer(cfg, rank, world)) == nil {
				io.ReadFull(b, make([]byte, 1)) // the dialer's first frame
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Duration(i%30) * 4 * time.Microsecond)
			cancel()
		}()
		err := DialContext(ctx, a, "tok", PlaneTCP, 1, 2)
		if err == nil {
			ok++
			a.SetDeadline(time.Time{}) // as the data planes do after the handshake
			time.Sleep(time.Millisecond)
			if _, werr := a.Write([]byte{1}); werr != nil {
				t.Fatalf("iteration %d: the handshake returned nil, then the connection's first write failed: %v", i, werr)
			}
		} else if !errors.Is(err, context.Canceled) {
			t.Fatalf("iteration %d: %v, want nil or the context's error", i, err)
		} else {
			failed++
		}
		a.Close()
		cancel()
	}
	t.Logf("%d handshakes through before the cancellation, %d cut by it", ok, failed)
}
