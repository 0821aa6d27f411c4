package allreduce

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/goddp/goddp/allreduce/link"
)

// authPair runs both sides of the handshake over a pipe.
func authPair(dialTok, listenTok string, dialPlane, listenPlane byte, cfg Config) (rank int, dialErr, acceptErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var world int
		rank, world, acceptErr = authAccept(b, listenTok, listenPlane)
		if acceptErr == nil {
			acceptErr = checkPeer(cfg, rank, world)
			authReply(b, acceptErr)
		}
		b.Close() // a refused dialer reads EOF after the reason
	}()
	dialErr = authDial(a, dialTok, dialPlane, 1, 2)
	a.Close()
	<-done
	return rank, dialErr, acceptErr
}

func TestAuth_handshake(t *testing.T) {
	cfg := Config{Rank: 0, WorldSize: 2}
	if r, d, a := authPair("tok", "tok", planeTCP, planeTCP, cfg); d != nil || a != nil || r != 1 {
		t.Fatalf("same token: dial %v, accept %v, rank %d", d, a, r)
	}
	// Empty tokens (no check asked for) still agree.
	if _, d, a := authPair("", "", planeGRPC, planeGRPC, cfg); d != nil || a != nil {
		t.Fatalf("empty token: dial %v, accept %v", d, a)
	}
	// The listener's proof is checked first: a dialer with another token sends no proof of its
	// own (zeros), which the listener refuses.
	_, d, a := authPair("tok", "other", planeTCP, planeTCP, cfg)
	if !errors.Is(d, errAuthListener) || !errors.Is(a, errAuthDialer) {
		t.Fatalf("other token: dial %v, accept %v", d, a)
	}
	if _, d, a := authPair("tok", "tok", planeGRPC, planeTCP, cfg); !errors.Is(a, errAuthPlane) || d == nil || !strings.Contains(d.Error(), "another data plane") {
		t.Fatalf("other plane: dial %v, accept %v", d, a)
	}
	// Proven, but of another world: refused with the reason.
	if _, d, a := authPair("tok", "tok", planeTCP, planeTCP, Config{Rank: 0, WorldSize: 3}); a == nil || d == nil || !strings.Contains(d.Error(), "does not fit this world of 3") {
		t.Fatalf("other world: dial %v, accept %v", d, a)
	}
}

// A dialer that proves nothing (a good hello, then a wrong MAC) is refused with the token named.
func TestAuth_wrongProofRefused(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		_, _, err := authAccept(b, "tok", planeTCP)
		errc <- err
	}()
	hello := append([]byte(authMagic), planeTCP, 1, 0, 2, 0)
	hello = append(hello, make([]byte, authNonceSize)...)
	a.Write(hello)
	io.ReadFull(a, make([]byte, authNonceSize+authMACSize))
	a.Write(make([]byte, authMACSize))
	var st [3]byte
	io.ReadFull(a, st[:])
	msg := make([]byte, int(st[1])|int(st[2])<<8)
	io.ReadFull(a, msg)
	if err := <-errc; !errors.Is(err, errAuthDialer) {
		t.Fatalf("accept: %v, want errAuthDialer", err)
	}
	if st[0] != authStatusNo || !strings.Contains(string(msg), "token") {
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
			c.Write(bytes.Repeat([]byte{0x5a}, authNonceSize+authMACSize)) // a guess at the proof
			c.Write([]byte{authStatusOK, 0, 0})                            // and "welcome"
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
	sq, addr := newSquatter(t, func(a string) string { return unixName(a, token) })
	tr := &tcpTransport{cfg: Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second, TransportKind: link.TransportTCP},
		addrs: []string{"", addr}}
	_, err := tr.dial(context.Background(), 1)
	if !errors.Is(err, errAuthListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, errAuthListener)
	}
	checkNothingLearned(t, sq, token)
}

// The same for the gRPC plane's dialer (rendezvous and data links).
func TestGRPC_squatterLearnsNothing(t *testing.T) {
	const token = "the-group-token-0123456789"
	sq, addr := newSquatter(t, func(a string) string { return grpcUnixName(a, token) })
	_, err := grpcAuthDial(context.Background(), addr, Config{Rank: 0, WorldSize: 2, Token: token, Timeout: 3 * time.Second}, nil)
	if !errors.Is(err, errAuthListener) {
		t.Fatalf("dial to a squatter: %v, want %v", err, errAuthListener)
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
	if len(got) != authHelloSize+authMACSize || !bytes.Equal(got[authHelloSize:], make([]byte, authMACSize)) {
		t.Errorf("the squatter received %d bytes, want only the %d-byte hello and a proof of zeros: % x", len(got), authHelloSize, got)
	}
	for _, form := range []string{token, token[:8], strings.ToUpper(token)} {
		if bytes.Contains(got, []byte(form)) {
			t.Fatalf("the squatter received the token (%q)", form)
		}
	}
	if k := authKey(token); bytes.Contains(got, k[:8]) {
		t.Fatal("the squatter received the key")
	}
}

// Unauthenticated clients cost a rank nothing: several token-less clients each stream 1 GiB at
// rank 0's rendezvous (one as a gRPC Join call whose message claims 1 GiB, as an attacker would
// send it; one as a good hello followed by garbage), and the process's peak memory stays within
// 64 MiB of its baseline; rank 0 then still forms its group.
func TestGRPC_unauthenticatedCostsNoMemory(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS here: %v", err)
	}
	master := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := func(r int) Config {
		return Config{Rank: r, WorldSize: 2, MasterAddr: master, Token: "secret", Timeout: 5 * time.Second, Logger: quietLogger()}
	}
	g0 := make(chan *Group, 1)
	go func() {
		g, err := NewGroup(ctx, cfg(0))
		if err != nil {
			t.Error(err)
		}
		g0 <- g
	}()
	var c net.Conn
	for c == nil && ctx.Err() == nil { // rank 0's listener comes up
		c, _ = net.Dial("tcp", master)
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	base := procStatusKB(t, "VmRSS")
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)

	const total = 1 << 30
	attacks := []func(net.Conn) error{
		func(c net.Conn) error { return grpcJoinFlood(c, total) },
		func(c net.Conn) error {
			hello := append([]byte(authMagic), planeGRPC, 1, 0, 2, 0)
			hello = append(hello, make([]byte, authNonceSize)...)
			if _, err := c.Write(hello); err != nil {
				return err
			}
			return flood(c, total)
		},
		func(c net.Conn) error { return flood(c, total) },
	}
	var wg sync.WaitGroup
	sent := make([]error, len(attacks))
	for i, attack := range attacks {
		wg.Go(func() {
			c, err := net.Dial("tcp", master)
			if err != nil {
				sent[i] = err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			sent[i] = attack(c)
		})
	}
	wg.Wait()
	for i, err := range sent {
		if err == nil {
			t.Errorf("attack %d: rank 0 took the whole 1 GiB without the token", i)
		}
	}
	peak := procStatusKB(t, "VmHWM")
	t.Logf("RSS baseline %d MiB, peak during the attacks %d MiB", base>>10, peak>>10)
	if peak-base > 64<<10 {
		t.Errorf("peak RSS %d MiB is %d MiB above the baseline %d MiB", peak>>10, (peak-base)>>10, base>>10)
	}
	g1, err := NewGroup(ctx, cfg(1))
	if err != nil {
		t.Fatalf("rank 1 after the attacks: %v", err)
	}
	defer g1.Close()
	if g := <-g0; g != nil {
		g.Close()
	}
}

// flood writes n zero bytes (fewer when the peer closes: the error).
func flood(c net.Conn, n int) error {
	buf := make([]byte, 1<<20)
	for ; n > 0; n -= len(buf) {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// grpcJoinFlood is a hand-written HTTP/2 client that calls Join with a message that claims, and
// then streams, n bytes (it ignores flow control and the server's frames).
func grpcJoinFlood(c net.Conn, n int) error {
	w := bufio.NewWriter(c)
	if _, err := w.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	fr := http2.NewFramer(w, c)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + serviceName + "/Join"},
		{":authority", c.RemoteAddr().String()}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	prefix := []byte{0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	fr.WriteData(1, false, prefix)
	chunk := make([]byte, 16<<10)
	for left := n; left > 0; left -= len(chunk) {
		if err := fr.WriteData(1, false, chunk); err != nil {
			return err
		}
		if left%(1<<20) == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return w.Flush()
}

func procStatusKB(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}
