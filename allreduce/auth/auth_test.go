package auth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/internal/leaftest"
	"github.com/goddp/goddp/allreduce/link"
)

// authPair runs both sides of the handshake over a pipe.
func authPair(dialTok, listenTok string, dialPlane, listenPlane byte, cfg link.Config) (rank int, dialErr, acceptErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var world int
		rank, world, acceptErr = Accept(b, listenTok, listenPlane, 5*time.Second)
		if acceptErr == nil {
			acceptErr = CheckPeer(cfg, rank, world)
			Reply(b, acceptErr)
		}
		b.Close() // a refused dialer reads EOF after the reason
	}()
	dialErr = Dial(a, dialTok, dialPlane, 1, 2)
	a.Close()
	<-done
	return rank, dialErr, acceptErr
}

func TestAuth_handshake(t *testing.T) {
	cfg := link.Config{Rank: 0, WorldSize: 2}
	if r, d, a := authPair("tok", "tok", PlaneTCP, PlaneTCP, cfg); d != nil || a != nil || r != 1 {
		t.Fatalf("same token: dial %v, accept %v, rank %d", d, a, r)
	}
	// Empty tokens (no check asked for) still agree.
	if _, d, a := authPair("", "", PlaneGRPC, PlaneGRPC, cfg); d != nil || a != nil {
		t.Fatalf("empty token: dial %v, accept %v", d, a)
	}
	// The listener's proof is checked first: a dialer with another token sends no proof of its
	// own (zeros), which the listener refuses.
	_, d, a := authPair("tok", "other", PlaneTCP, PlaneTCP, cfg)
	if !errors.Is(d, ErrListener) || !errors.Is(a, ErrDialer) {
		t.Fatalf("other token: dial %v, accept %v", d, a)
	}
	if _, d, a := authPair("tok", "tok", PlaneGRPC, PlaneTCP, cfg); !errors.Is(a, ErrPlane) || d == nil || !strings.Contains(d.Error(), "another data plane") {
		t.Fatalf("other plane: dial %v, accept %v", d, a)
	}
	// Proven, but of another world: refused with the reason.
	if _, d, a := authPair("tok", "tok", PlaneTCP, PlaneTCP, link.Config{Rank: 0, WorldSize: 3}); a == nil || d == nil || !strings.Contains(d.Error(), "does not fit this world of 3") {
		t.Fatalf("other world: dial %v, accept %v", d, a)
	}
}

// A dialer that proves nothing (a good hello, then a wrong MAC) is refused with the token named.
// Both sides have deadlines: with the MAC check broken the listener answers nothing and the
// test fails in a second instead of hanging.
func TestAuth_wrongProofRefused(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(time.Second))
	errc := make(chan error, 1)
	go func() {
		_, _, err := Accept(b, "tok", PlaneTCP, time.Second)
		errc <- err
	}()
	hello := append([]byte(magic), PlaneTCP, 1, 0, 2, 0)
	hello = append(hello, make([]byte, nonceSize)...)
	a.Write(hello)
	io.ReadFull(a, make([]byte, nonceSize+macSize))
	a.Write(make([]byte, macSize))
	var st [3]byte
	io.ReadFull(a, st[:])
	msg := make([]byte, int(st[1])|int(st[2])<<8)
	io.ReadFull(a, msg)
	var err error
	select {
	case err = <-errc:
	case <-time.After(2 * time.Second):
		t.Fatal("accept did not return")
	}
	if !errors.Is(err, ErrDialer) {
		t.Fatalf("accept: %v, want ErrDialer", err)
	}
	if st[0] != statusNo || !strings.Contains(string(msg), "token") {
		t.Fatalf("status %d %q", st[0], msg)
	}
}

// The same for the gRPC plane's dialer (rendezvous and data links).
func TestGRPC_squatterLearnsNothing(t *testing.T) {
	const token = "the-group-token-0123456789"
	guess := append(bytes.Repeat([]byte{0x5a}, nonceSize+macSize), statusOK, 0, 0) // a guess at the proof, and "welcome"
	sq, addr := leaftest.NewSquatter(t, func(a string) string { return GRPCUnixName(a, token) }, guess)
	_, err := DialGRPC(context.Background(), addr, link.Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second}, nil)
	if !errors.Is(err, ErrListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, ErrListener)
	}
	sq.CheckLearnedNothing(t, token, helloSize, macSize, tokenKey(token))
}
