package tcpnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/tcpnet"
)

// A data link to a peer that accepts the connection and never answers the handshake (a
// stopped process: its kernel still accepts) ends as soon as the Send's context does, with the
// context's error; before, it waited for the handshake's 10 s Deadline whatever the context.
func TestTCP_dialToSilentPeerTakesTheContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hello := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
			if _, err := io.ReadFull(c, make([]byte, 8)); err == nil { // the hello's magic
				hello <- struct{}{}
			}
		}
	}()
	defer func() { l.Close(); <-done }()

	cfg := link.Config{Rank: 1, WorldSize: 2, Token: "tok", Timeout: time.Minute, TransportKind: link.TransportTCP}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- tcpnet.DialAsContext(ctx, cfg, []string{l.Addr().String(), ""}, 0) }()
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
	case <-time.After(2 * time.Second):
		t.Fatal("the data-plane handshake with a silent peer outlived its cancelled context by 2 s")
	}
}
