package auth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

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

// squatter is a local process that took a rank's addresses first (the TCP port and the Unix
// socket name, as if it knew the token): it records every byte peers send it and answers the
// hello with a guess.
type squatter struct {
	mu   sync.Mutex
	got  bytes.Buffer
	lis  []net.Listener
	dial int
}

func newSquatter(t *testing.T, unixName func(addr string) string) (*squatter, string) {
	t.Helper()
	s := &squatter{}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := tl.Addr().String()
	s.lis = append(s.lis, tl)
	if ul, err := net.Listen("unix", unixName(addr)); err == nil {
		s.lis = append(s.lis, ul)
	}
	for _, l := range s.lis {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				s.mu.Lock()
				s.dial++
				s.mu.Unlock()
				go s.serve(c)
			}
		}()
	}
	t.Cleanup(func() {
		for _, l := range s.lis {
			l.Close()
		}
	})
	return s, addr
}

func (s *squatter) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 4096)
	answered := false
	for {
		n, err := c.Read(buf)
		s.mu.Lock()
		s.got.Write(buf[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
		if !answered {
			answered = true
			c.Write(bytes.Repeat([]byte{0x5a}, nonceSize+macSize)) // a guess at the proof
			c.Write([]byte{statusOK, 0, 0})                        // and "welcome"
		}
	}
}

func (s *squatter) received() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.got.Bytes())
}

// The same for the gRPC plane's dialer (rendezvous and data links).
func TestGRPC_squatterLearnsNothing(t *testing.T) {
	const token = "the-group-token-0123456789"
	sq, addr := newSquatter(t, func(a string) string { return GRPCUnixName(a, token) })
	_, err := DialGRPC(context.Background(), addr, link.Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second}, nil)
	if !errors.Is(err, ErrListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, ErrListener)
	}
	checkNothingLearned(t, sq, token)
}

func checkNothingLearned(t *testing.T, sq *squatter, token string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // the squatter's last reads
	got := sq.received()
	if len(got) == 0 || sq.dial == 0 {
		t.Fatal("the squatter was never dialled: the test proves nothing")
	}
	if len(got) != helloSize+macSize || !bytes.Equal(got[helloSize:], make([]byte, macSize)) {
		t.Errorf("the squatter received %d bytes, want only the %d-byte hello and a proof of zeros: % x", len(got), helloSize, got)
	}
	for _, form := range []string{token, token[:8], strings.ToUpper(token)} {
		if bytes.Contains(got, []byte(form)) {
			t.Fatalf("the squatter received the token (%q)", form)
		}
	}
	if k := tokenKey(token); bytes.Contains(got, k[:8]) {
		t.Fatal("the squatter received the key")
	}
}
