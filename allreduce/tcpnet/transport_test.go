package tcpnet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/internal/grouptest"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/tcpnet"
)

// The tcp data plane checks the token (and the rank) of every connection and logs a refusal.
func TestTCP_wrongTokenRefused(t *testing.T) {
	for _, kind := range []string{"tcp", "tcp-inet"} {
		t.Run(kind, func(t *testing.T) { testTCPWrongToken(t, kind) })
	}
}

func testTCPWrongToken(t *testing.T, kind string) {
	rec := &grouptest.RecordingHandler{}
	gs := grouptest.NewGroups(t, kind, 2, func(c *allreduce.Config) {
		if c.Rank == 0 {
			c.Logger = slog.New(rec)
		}
	})
	addrs := grouptest.Plane(gs[0]).(*tcpnet.Transport).Addrs()
	// With a wrong token the dialler is the first to see it (rank 0's proof does not check out,
	// package auth); rank 0 still refuses the connection and logs it.
	for _, tc := range []struct {
		name, token string
		rank        int
		want        string
	}{{"wrong token", "wrong", 1, "did not prove the group token"}, {"own rank", "secret", 0, "refused"}, {"taken rank", "secret", 1, "refused"}} {
		// Rank 1's real link to rank 0 exists once it has sent something.
		grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.Barrier(context.Background()) }))
		err := tcpnet.DialAs(link.Config{Rank: tc.rank, WorldSize: 2, Token: tc.token, Timeout: 2 * time.Second, TransportKind: kind}, addrs, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: dial got %v, want %q", tc.name, err, tc.want)
		}
	}
	if !rec.Has("wrong or missing token") || !rec.Has("refused") {
		t.Fatalf("refusals not logged: %v", rec.Msgs())
	}
	// The group still works.
	grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error {
		return g.AllReduce(context.Background(), make([]float32, 1000), allreduce.Sum, allreduce.WireF16)
	}))
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
			c.Write(bytes.Repeat([]byte{0x5a}, 32+macSize)) // a guess at the proof
			c.Write([]byte{0, 0, 0})                        // and "welcome" (status OK)
		}
	}
}

func (s *squatter) received() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.got.Bytes())
}

// A squatter on a tcp-transport peer's addresses learns nothing: the dial fails naming the
// failed proof, and no byte it received contains the token.
func TestTCP_squatterLearnsNothing(t *testing.T) {
	const token = "the-group-token-0123456789"
	sq, addr := newSquatter(t, func(a string) string { return tcpnet.UnixName(a, token) })
	err := tcpnet.DialAs(link.Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second, TransportKind: link.TransportTCP}, []string{"", addr}, 1)
	if !errors.Is(err, auth.ErrListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, auth.ErrListener)
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

// The handshake's sizes and key (package auth), as a squatter sees them.
const (
	helloSize = 8 + 1 + 2 + 2 + 32 // magic, plane, rank, world, nonce
	macSize   = sha256.Size
)

func tokenKey(token string) []byte {
	k := sha256.Sum256([]byte("goddp-auth\x00" + token))
	return k[:]
}
