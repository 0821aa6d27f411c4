package auth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/link"
)

// silentPeer listens on loopback and accepts connections whose hello it reads and never answers,
// as a stopped process's kernel accepts them; hello gets a value once a dialler is waiting.
func silentPeer(t *testing.T) (addr string, hello <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
			if _, err := io.ReadFull(c, make([]byte, helloSize)); err == nil {
				ch <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String(), ch
}

// A dial whose peer accepted and never answers the handshake returns as soon as its context
// is cancelled, with the context's error, not after the handshake's Deadline (10 s) or the
// group's timeout: an aborting rank's abort frame to a frozen peer no longer holds it there.
func TestDialGRPC_silentPeerTakesTheContext(t *testing.T) {
	addr, hello := silentPeer(t)
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
	select {
	case <-hello:
	case <-time.After(5 * time.Second):
		t.Fatal("the dialler never sent its hello")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("dial to a silent peer, context cancelled: %v, want %v", err, context.Canceled)
		}
		t.Logf("returned %v after the cancel", time.Since(start))
	case <-time.After(HelloDeadline):
		t.Fatalf("the handshake with a silent peer outlived its cancelled context by %v", HelloDeadline)
	}
}

// Closing a listener ends the handshakes in progress at once: a dialler that sent its hello
// and then stalls (a frozen peer, or a flood that sends hellos) held Close until the
// handshake's Deadline (10 s) before.
func TestListener_closeEndsStalledHandshakes(t *testing.T) {
	pl := newPipeListener()
	cfg := link.Config{Rank: 0, WorldSize: 2, Token: "tok", Timeout: time.Minute}
	lis := NewListener(pl, cfg, slog.New(&logRecorder{}))
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
