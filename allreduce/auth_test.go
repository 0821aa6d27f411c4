package allreduce

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/goddp/goddp/allreduce/auth"
	"github.com/goddp/goddp/allreduce/link"
)

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
	cfg := func(r int) link.Config {
		return link.Config{Rank: r, WorldSize: 2, MasterAddr: master, Token: "secret", Timeout: 5 * time.Second, Logger: quietLogger()}
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
			hello := append([]byte("GDDPAUT1"), auth.PlaneGRPC, 1, 0, 2, 0) // a good hello (package auth)
			hello = append(hello, make([]byte, 32)...)
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
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + link.ServiceName + "/Join"},
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
