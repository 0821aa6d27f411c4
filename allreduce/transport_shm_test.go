//go:build linux

package allreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// shmLinks counts the links of a world (tcp or grpc kind) that carry a shared-memory ring, out
// and in. (An incoming gRPC ring is set by the push goroutine before the first frame behind the
// offer: a world that finished a collective has every ring it will have.)
func shmLinks(gs []*Group) (out, in int) {
	for _, g := range gs {
		switch tr := g.tr.(type) {
		case *tcpTransport:
			tr.outMu.Lock()
			out += countLinks(tr.out, func(l *tcpOut) bool { return l.shm != nil })
			tr.outMu.Unlock()
			in += countLinks(tr.in, func(i *tcpIn) bool { i.mu.Lock(); defer i.mu.Unlock(); return i.shm != nil })
		case *grpcTransport:
			tr.outMu.Lock()
			out += countLinks(tr.out, func(l *outLink) bool { return l.shm != nil })
			tr.outMu.Unlock()
			in += countLinks(tr.in, func(i *inbox) bool { i.mu.Lock(); defer i.mu.Unlock(); return i.shm != nil })
		}
	}
	return out, in
}

func countLinks[L any](links []*L, has func(*L) bool) (n int) {
	for _, l := range links {
		if l != nil && has(l) {
			n++
		}
	}
	return n
}

// shmKinds are the transport kinds whose same-host links carry shared-memory rings.
var shmKinds = []string{"tcp", "grpc"}

// shmPair is a two-rank world of kind whose rings hold one page, with rank 0's ring toward
// rank 1 filled so that the next Send of 1500 B must wait: rank 1 receives nothing, the
// barrier left the tail a few bytes in, two frames of 1500 B fit behind it, the third does not
// fit before the end of the lap, and the next lap needs rank 1 to release the first. It
// returns the world, rank 0's Send to rank 1, and a kill of rank 1.
func shmPair(t *testing.T, kind string, timeout time.Duration) ([]*Group, func(context.Context) error, func()) {
	t.Helper()
	gs := newGroups(t, kind, 2, func(c *Config) { c.Timeout = timeout; c.SharedMemBytes = 4096 })
	noErrors(t, each(gs, func(g *Group) error { return g.Barrier(context.Background()) }))
	if out, in := shmLinks(gs); out != 2 || in != 2 {
		t.Fatalf("%d/%d links have a ring, want 2/2", out, in)
	}
	send := func(ctx context.Context) error { return gs[0].tr.Send(ctx, 1, bytesPayload(make([]byte, 1500))) }
	for i := range 2 {
		if err := send(context.Background()); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	return gs, send, func() { killRank(t, kind, gs[1]) }
}

// Same-host tcp links set up a ring each way they are used, and the results are the ring
// all-reduce's to the bit; a side that declines (or has shared memory off) leaves the link
// on the socket, with the same results.
func TestShm_linksAndResults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shm      func(rank int) int
		wantRing bool
	}{
		{"default", func(int) int { return 0 }, true},
		{"off", func(int) int { return -1 }, false},
		{"rank1 declines", func(r int) int { return map[bool]int{true: -1, false: 0}[r == 1] }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := newGroups(t, "tcp", 2, func(c *Config) { c.SharedMemBytes = tc.shm(c.Rank) })
			for _, wire := range []Wire{WireF32, WireF16} {
				checkAllReduce(t, gs, 3<<18+5, Sum, wire, wire == WireF32)
				checkAllReduce(t, gs, 1000, Avg, wire, false)
			}
			out, in := shmLinks(gs)
			want := 0
			if tc.wantRing {
				want = 2
			}
			if out != want || in != want {
				t.Fatalf("%d outgoing and %d incoming links with a ring, want %d and %d", out, in, want, want)
			}
		})
	}
}

// A ring far smaller than the data: frames wrap around the ring's end many times, senders wait
// for space (tcp: wake bytes; grpc: the futex), and frames over half the ring take the socket
// or the stream in between, in order.
func TestShm_smallRingWrapsAndWaits(t *testing.T) {
	for _, kind := range shmKinds {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n%d", kind, n), func(t *testing.T) {
				gs := newGroups(t, kind, n, func(c *Config) { c.SharedMemBytes = 3 * 4096; c.ChunkBytes = 2500 })
				for _, size := range []int{1, 1000, 1 << 16, 200003} {
					checkAllReduce(t, gs, size, Sum, WireF32, true)
					checkAllReduce(t, gs, size, Avg, WireF16, false)
				}
				// Broadcast and all-gather frames of other sizes share the same rings.
				ctx := context.Background()
				src := inputs(n, 50000, 9, true)
				noErrors(t, each(gs, func(g *Group) error { return g.BroadcastF32(ctx, src[g.Rank()], 1) }))
				for r := range n {
					for i := range src[r] {
						if src[r][i] != src[1][i] {
							t.Fatalf("broadcast: rank %d [%d] = %g, want %g", r, i, src[r][i], src[1][i])
						}
					}
				}
				if out, in := shmLinks(gs); out < n || in < n {
					t.Fatalf("%d/%d links have a ring, want at least %d", out, in, n)
				}
			})
		}
	}
}

// A sender waiting for ring space learns of a receiver that dies, naming it, well within the
// timeout (tcp: the socket's EOF; grpc: it watches its connection between sleeps).
func TestShm_receiverDiesWhileSenderWaits(t *testing.T) {
	for _, kind := range shmKinds {
		t.Run(kind, func(t *testing.T) {
			timeout := 5 * time.Second
			_, send, kill := shmPair(t, kind, timeout)
			done := make(chan error, 1)
			go func() { done <- send(context.Background()) }()
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("the third send did not wait: %v", err)
			default:
			}
			start := time.Now()
			kill()
			select {
			case err := <-done:
				var pe *PeerError
				if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, ErrPeerGone) {
					t.Fatalf("got %v, want a PeerError naming rank 1 (gone)", err)
				}
				t.Logf("noticed after %v", time.Since(start))
			case <-time.After(timeout / 2):
				t.Fatal("the waiting sender did not notice the dead receiver")
			}
		})
	}
}

// A sender waiting for space gives up when its context ends (after sendGrace).
func TestShm_waitCancelled(t *testing.T) {
	for _, kind := range shmKinds {
		t.Run(kind, func(t *testing.T) {
			_, send, _ := shmPair(t, kind, 5*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			err := send(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want the context's error", err)
			}
			if el := time.Since(start); el < 50*time.Millisecond || el > sendGrace+time.Second {
				t.Fatalf("gave up after %v (sendGrace %v)", el, sendGrace)
			}
		})
	}
}

// A doorbell that does not match the ring (wrong position, too large, or on a link without a
// ring) is a malformed frame, not a read out of bounds.
func TestShm_badDoorbell(t *testing.T) {
	r, f, err := newShmRing(4096)
	if err != nil {
		t.Skipf("no shared memory here: %v", err)
	}
	f.Close()
	defer r.unmap()
	for _, tc := range []struct {
		name string
		ring bool
		n    uint32
		pos  uint64
	}{
		{"no ring", false, 16, 0},
		{"wrong position", true, 16, 8},
		{"too large", true, 4000, 0},
		{"past the end", true, 2048, 4096 - 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			in := &tcpIn{conn: b}
			if tc.ring {
				in.shm = r
			}
			var db [12]byte
			binary.LittleEndian.PutUint32(db[:], tc.n|shmDoorbell)
			binary.LittleEndian.PutUint64(db[4:], tc.pos)
			go a.Write(db[:])
			_, err := in.read()
			if !errors.Is(err, errShmFrame) {
				t.Fatalf("got %v, want %v", err, errShmFrame)
			}
		})
	}
	// A good one is a view of the ring at its place.
	a, b := net.Pipe()
	defer a.Close()
	in := &tcpIn{conn: b, shm: r}
	copy(r.at(0, 5), "hello")
	var db [12]byte
	binary.LittleEndian.PutUint32(db[:], 5|shmDoorbell)
	go a.Write(db[:])
	got, err := in.read()
	if err != nil || string(got) != "hello" || !in.held || in.next != 5 {
		t.Fatalf("got %q, %v (held %v, next %d)", got, err, in.held, in.next)
	}
}
