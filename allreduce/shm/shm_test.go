//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/allreduce/internal/grouptest"
	"github.com/goddp/goddp/allreduce/link"
	"github.com/goddp/goddp/allreduce/shm"
)

// The shared-memory decorator over both data planes it wraps, and over in-process links.

// shmKinds are the transport kinds whose same-host links carry shared-memory rings.
var shmKinds = []string{"grpc", "tcp"}

// shmLinks counts the links of a world that carry a shared-memory ring, out and in.
func shmLinks(gs []*allreduce.Group) (out, in int) {
	for _, g := range gs {
		o, i := shm.RingLinks(grouptest.Transport(g))
		out, in = out+o, in+i
	}
	return out, in
}

// shmPair is a two-rank world of kind whose rings hold one page, with rank 0's ring toward
// rank 1 filled so that the next Send of 1500 B must wait: rank 1 receives nothing, the
// barrier left the tail a few bytes in, two frames of 1500 B fit behind it, the third does not
// fit before the end of the lap, and the next lap needs rank 1 to release the first. It
// returns the world, rank 0's Send to rank 1, and a kill of rank 1.
func shmPair(t *testing.T, kind string, timeout time.Duration) ([]*allreduce.Group, func(context.Context) error, func()) {
	t.Helper()
	gs := grouptest.NewGroups(t, kind, 2, func(c *allreduce.Config) { c.Timeout = timeout; c.SharedMemBytes = 4096 })
	grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.Barrier(context.Background()) }))
	if out, in := shmLinks(gs); out != 2 || in != 2 {
		t.Fatalf("%d/%d links have a ring, want 2/2", out, in)
	}
	send := func(ctx context.Context) error {
		return grouptest.Transport(gs[0]).Send(ctx, 1, link.Bytes(make([]byte, 1500)))
	}
	for i := range 2 {
		if err := send(context.Background()); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	return gs, send, func() { grouptest.KillRank(t, kind, gs[1]) }
}

// Same-host links of both data planes set up a ring each way they are used, and the results
// are the ring all-reduce's to the bit; a rank with shared memory off declines the offers made
// to it and makes none, and the results are the same.
func TestShm_linksAndResults(t *testing.T) {
	for _, kind := range shmKinds {
		for _, tc := range []struct {
			name string
			shm  func(rank int) int
			want int // links with a ring, each of out and in, in a world of 3
		}{
			{"default", func(int) int { return 0 }, 3},
			{"off", func(int) int { return -1 }, 0},
			{"rank1 off", func(r int) int { return map[bool]int{true: -1, false: 0}[r == 1] }, 1}, // 2->0 only
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				gs := grouptest.NewGroups(t, kind, 3, func(c *allreduce.Config) { c.SharedMemBytes = tc.shm(c.Rank) })
				for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16} {
					grouptest.CheckAllReduce(t, gs, 3<<18+5, allreduce.Sum, wire, wire == allreduce.WireF32)
					grouptest.CheckAllReduce(t, gs, 1000, allreduce.Avg, wire, false)
				}
				if out, in := shmLinks(gs); out != tc.want || in != tc.want {
					t.Fatalf("%d outgoing and %d incoming links with a ring, want %d and %d", out, in, tc.want, tc.want)
				}
			})
		}
	}
	// Between hosts (here: TCP without Unix sockets) no link offers.
	gs := grouptest.NewGroups(t, "tcp-inet", 2, nil)
	grouptest.CheckAllReduce(t, gs, 1000, allreduce.Avg, allreduce.WireF16, false)
	if out, in := shmLinks(gs); out != 0 || in != 0 {
		t.Fatalf("tcp-inet: %d/%d links with a ring", out, in)
	}
}

// A ring far smaller than the data: records wrap around the ring's end many times, senders
// wait for space, and with chunks over half the ring every data frame is a stream record that
// follows on the link, in order with the rest.
func TestShm_smallRingWrapsAndWaits(t *testing.T) {
	for _, kind := range shmKinds {
		for _, n := range []int{2, 3, 4} {
			for _, sz := range []struct{ ring, chunk int }{{3 * 4096, 2500}, {4096, 3000}} {
				t.Run(fmt.Sprintf("%s/n%d/ring%d-chunk%d", kind, n, sz.ring, sz.chunk), func(t *testing.T) {
					gs := grouptest.NewGroups(t, kind, n, func(c *allreduce.Config) { c.SharedMemBytes = sz.ring; c.ChunkBytes = sz.chunk })
					for _, size := range []int{1, 1000, 1 << 16, 200003} {
						grouptest.CheckAllReduce(t, gs, size, allreduce.Sum, allreduce.WireF32, true)
						grouptest.CheckAllReduce(t, gs, size, allreduce.Avg, allreduce.WireF16, false)
					}
					// Broadcast and all-gather frames of other sizes share the same rings.
					ctx := context.Background()
					src := grouptest.Inputs(n, 50000, 9, true)
					grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.BroadcastF32(ctx, src[g.Rank()], 1) }))
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
}

// A sender waiting for ring space learns of a receiver that dies, naming it, well within the
// timeout: it asks the link between sleeps.
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
				var pe *link.PeerError
				if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, link.ErrPeerGone) {
					t.Fatalf("got %v, want a link.PeerError naming rank 1 (gone)", err)
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
			if el := time.Since(start); el < 50*time.Millisecond || el > link.SendGrace+time.Second {
				t.Fatalf("gave up after %v (link.SendGrace %v)", el, link.SendGrace)
			}
		})
	}
}

// A receiver waiting on a ring learns of a sender that dies after the records it published,
// which it gets first.
func TestShm_senderDiesAfterPublishing(t *testing.T) {
	for _, kind := range shmKinds {
		t.Run(kind, func(t *testing.T) {
			gs := grouptest.NewGroups(t, kind, 2, func(c *allreduce.Config) { c.Timeout = 5 * time.Second })
			grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.Barrier(context.Background()) }))
			if err := grouptest.Transport(gs[0]).Send(context.Background(), 1, link.Bytes("last words")); err != nil {
				t.Fatal(err)
			}
			grouptest.KillRank(t, kind, gs[0])
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if b, err := grouptest.Transport(gs[1]).Recv(ctx, 0); err != nil || string(b) != "last words" {
				t.Fatalf("got %q, %v; want what was published first", b, err)
			}
			_, err := grouptest.Transport(gs[1]).Recv(ctx, 0)
			var pe *link.PeerError
			if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, link.ErrPeerGone) {
				t.Fatalf("got %v, want a link.PeerError naming rank 0 (gone)", err)
			}
		})
	}
}

// A record the ring cannot hold (unknown kind, a frame crossing the lap's end or reaching past
// what was published, a skip at a lap's start, an empty frame) is a malformed frame naming the
// peer, not a read out of bounds.
func TestShm_badRecord(t *testing.T) {
	for _, kind := range shmKinds {
		for _, tc := range []struct {
			name   string
			write  func(r *shm.TestRing, pos uint64) uint64 // writes at pos, returns the tail to publish
			expect string
		}{
			{"unknown kind", func(r *shm.TestRing, pos uint64) uint64 { r.PutRecord(pos, 9, 16); return pos + 24 }, "kind 9"},
			{"empty frame", func(r *shm.TestRing, pos uint64) uint64 { r.PutRecord(pos, shm.RecFrame, 0); return pos + 8 }, "frame of 0"},
			{"past the tail", func(r *shm.TestRing, pos uint64) uint64 { r.PutRecord(pos, shm.RecFrame, 64); return pos + 16 }, "published up to"},
			{"past the lap", func(r *shm.TestRing, pos uint64) uint64 {
				r.PutRecord(pos, shm.RecFrame, int(r.Size()))
				return pos + shm.RecHeader + r.Size()
			}, "ring"},
			{"skip at a lap's start", func(r *shm.TestRing, pos uint64) uint64 {
				if pos%r.Size() != 0 {
					r.PutRecord(pos, shm.RecSkip, 0)
					pos += r.Size() - pos%r.Size()
				}
				r.PutRecord(pos, shm.RecSkip, 0)
				return pos + 8
			}, "start of a lap"},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				gs := grouptest.NewGroups(t, kind, 2, func(c *allreduce.Config) { c.SharedMemBytes = 4096 })
				grouptest.NoErrors(t, grouptest.Each(gs, func(g *allreduce.Group) error { return g.Barrier(context.Background()) }))
				r := shm.OutRing(grouptest.Transport(gs[0]), 1)
				if r == nil {
					t.Fatal("link 0->1 has no ring")
				}
				r.Publish(tc.write(r, r.Tail()))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := grouptest.Transport(gs[1]).Recv(ctx, 0)
				var pe *link.PeerError
				if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, shm.ErrFrame) ||
					!strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), tc.expect) {
					t.Fatalf("got %v, want a malformed-frame link.PeerError naming rank 0 (%q)", err, tc.expect)
				}
			})
		}
	}
}

// A link whose first message is not the hello (another build, or a peer without the
// decorator) fails naming the peer, on both data planes.
func TestShm_helloRequired(t *testing.T) {
	for _, kind := range []string{"grpc", "grpc-noshm", "tcp", "tcp-inet"} {
		t.Run(kind, func(t *testing.T) {
			gs := grouptest.NewGroups(t, kind, 2, nil)
			// A keepalive frame (the core's frame.go): magic, version 1, kind 6, wire bytes, seq 1.
			frame := make([]byte, link.FrameHeaderSize)
			copy(frame, []byte{0x9E, 0xDD, 1, 6, 2, 0, 0, 0, 1})
			if err := grouptest.Plane(gs[0]).Send(context.Background(), 1, link.Bytes(frame)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := grouptest.Transport(gs[1]).Recv(ctx, 0)
			var pe *link.PeerError
			if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, shm.ErrHello) {
				t.Fatalf("got %v, want a link.PeerError naming rank 0 (%v)", err, shm.ErrHello)
			}
		})
	}
}

// Between processes: the ring is opened through /proc/PID/fd, on both data planes; a child
// process is rank 1.
func TestShm_acrossProcesses(t *testing.T) {
	if os.Getenv("GODDP_SHM_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, kind := range shmKinds {
		t.Run(kind, func(t *testing.T) {
			master := grouptest.FreeAddr(t)
			var out bytes.Buffer
			cmd := exec.Command(os.Args[0], "-test.run=^TestShmChildProcess$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "GODDP_SHM_CHILD="+kind, "GODDP_SHM_MASTER="+master)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			err := shmProcessRank(kind, 0, master)
			werr := cmd.Wait()
			if err != nil || werr != nil || !strings.Contains(out.String(), "--- PASS: TestShmChildProcess") {
				t.Fatalf("rank 0: %v; rank 1 (child): %v\n%s", err, werr, out.String())
			}
		})
	}
}

// TestShmChildProcess is rank 1 of TestShm_acrossProcesses, in a child process.
func TestShmChildProcess(t *testing.T) {
	kind := os.Getenv("GODDP_SHM_CHILD")
	if kind == "" {
		t.Skip("only as TestShm_acrossProcesses's child")
	}
	if err := shmProcessRank(kind, 1, os.Getenv("GODDP_SHM_MASTER")); err != nil {
		t.Fatal(err)
	}
}

// shmProcessRank is one rank of a two-process world: an all-reduce of exact values through
// rings of 64 KiB (many wraps and waits), checked, and both of its links on a ring.
func shmProcessRank(kind string, rank int, master string) error {
	cfg := link.Config{Rank: rank, WorldSize: 2, MasterAddr: master, Token: "secret", Timeout: 20 * time.Second,
		Logger: grouptest.QuietLogger(), SharedMemBytes: 64 << 10, ChunkBytes: 16 << 10}
	if kind == "tcp" {
		cfg.TransportKind = link.TransportTCP
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := allreduce.NewTransport(ctx, cfg)
	if err != nil {
		return err
	}
	cfg.Transport = tr
	g, err := allreduce.NewGroup(ctx, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	const size = 1<<20 + 3
	buf := make([]float32, size)
	for i := range buf {
		buf[i] = float32(i%1000 + rank*1000) // sums exact in f32
	}
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16} {
		b := append([]float32{}, buf...)
		if err := g.AllReduce(ctx, b, allreduce.Sum, wire); err != nil {
			return fmt.Errorf("all-reduce over %s: %v", wire, err)
		}
		for i, v := range b {
			want := float32(2*(i%1000) + 1000)
			if wire == allreduce.WireF16 {
				if math.Abs(float64(v-want)) > 0.002*float64(want) {
					return fmt.Errorf("%s: [%d] = %g, want about %g", wire, i, v, want)
				}
			} else if v != want {
				return fmt.Errorf("%s: [%d] = %g, want %g", wire, i, v, want)
			}
		}
	}
	if out, in := shm.RingLinks(tr); out != 1 || in != 1 {
		return fmt.Errorf("rank %d: %d outgoing and %d incoming links with a ring, want 1 and 1", rank, out, in)
	}
	return g.Barrier(ctx)
}

// hostInproc is an in-process endpoint that tells the decorator its links are same-host ones,
// with a back channel per link: the decorator over a data plane without sockets.
type hostInproc struct {
	link.Transport
	rank int
	back [][]chan []byte // back[sender][receiver]: answers to the sender's offers
	dead []chan struct{} // closed when that rank's endpoint is
	once []*sync.Once
}

var _ link.Linker = hostInproc{}

func newHostInproc(n int) []hostInproc {
	nw := allreduce.NewInprocNetwork(n)
	back := make([][]chan []byte, n)
	dead := make([]chan struct{}, n)
	once := make([]*sync.Once, n)
	for i := range back {
		back[i] = make([]chan []byte, n)
		for j := range back[i] {
			back[i][j] = make(chan []byte, 1)
		}
		dead[i], once[i] = make(chan struct{}), &sync.Once{}
	}
	eps := make([]hostInproc, n)
	for r := range eps {
		eps[r] = hostInproc{nw.Transport(r), r, back, dead, once}
	}
	return eps
}

func (h hostInproc) Close() error {
	h.once[h.rank].Do(func() { close(h.dead[h.rank]) })
	return h.Transport.Close()
}

func (h hostInproc) LinkTo(context.Context, int) (bool, error) { return true, nil }
func (h hostInproc) LinkFromLocal(int) bool                    { return true }
func (h hostInproc) Answer(from int, b []byte) error {
	h.back[from][h.rank] <- append([]byte(nil), b...)
	return nil
}

func (h hostInproc) ReadAnswer(ctx context.Context, to int, b []byte) error {
	select {
	case a := <-h.back[h.rank][to]:
		copy(b, a)
		return nil
	case <-h.dead[to]:
		return &link.PeerError{Rank: to, Err: link.ErrPeerGone}
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (h hostInproc) LinkDown(peer int, _ bool) bool {
	select {
	case <-h.dead[peer]:
		return true
	default:
		return false
	}
}

// The decorator is plane-neutral: over in-process links that claim to be same-host, every link
// gets a ring, results are exact, records wrap and stream records interleave, and a sender
// waiting for space learns of a receiver that is gone.
func TestShm_overInproc(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			eps := newHostInproc(n)
			gs := make([]*allreduce.Group, n)
			trs := make([]link.Transport, n)
			for r := range gs {
				cfg := link.Config{Rank: r, WorldSize: n, Timeout: 5 * time.Second, Logger: grouptest.QuietLogger(), SharedMemBytes: 4096, ChunkBytes: 1500}
				cfg.Transport = shm.Wrap(eps[r], cfg)
				trs[r] = cfg.Transport
				g, err := allreduce.NewGroup(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				gs[r] = g
				t.Cleanup(func() { g.Close() })
			}
			for _, size := range []int{1, 3000, 100_003} {
				grouptest.CheckAllReduce(t, gs, size, allreduce.Sum, allreduce.WireF32, true)
				grouptest.CheckAllReduce(t, gs, size, allreduce.Avg, allreduce.WireF16, false)
			}
			var out, in int
			for _, tr := range trs {
				o, i := shm.RingLinks(tr)
				out, in = out+o, in+i
			}
			if out != n || in != n {
				t.Fatalf("%d/%d links have a ring, want %d", out, in, n)
			}
			// Over half the ring: a stream record, then the frame as a message.
			big := make([]byte, 3000)
			big[2999] = 7
			done := make(chan error, 1)
			go func() { done <- trs[0].Send(context.Background(), 1, link.Bytes(big)) }()
			b, err := trs[1].Recv(context.Background(), 0)
			if err != nil || len(b) != 3000 || b[2999] != 7 || <-done != nil {
				t.Fatalf("a frame over half the ring: %d bytes, %v", len(b), err)
			}
			// Fill rank 0's ring toward 1, then rank 1 dies under the waiting sender.
			var serr error
			for range 8 {
				if serr = trs[0].Send(context.Background(), 1, link.Bytes(make([]byte, 1000))); serr != nil {
					break
				}
				if r := shm.OutRing(trs[0], 1); !r.Room(r.Tail() + 1016) {
					go func() { time.Sleep(100 * time.Millisecond); eps[1].Close() }()
				}
			}
			var pe *link.PeerError
			if !errors.As(serr, &pe) || pe.Rank != 1 {
				t.Fatalf("sending into a full ring toward a dead rank: %v, want a link.PeerError naming rank 1", serr)
			}
		})
	}
}
