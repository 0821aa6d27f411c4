//go:build linux

package allreduce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// gRPC links between ranks of one host carry frames through shared-memory rings, each way
// they are used; a rank with shared memory off declines the offers made to it and makes none,
// and the results are the same to the bit.
func TestGRPCShm_linksAndResults(t *testing.T) {
	for _, tc := range []struct {
		name string
		shm  func(rank int) int
		want int // links with a ring, each of out and in, in a world of 3
	}{
		{"default", func(int) int { return 0 }, 3},
		{"off", func(int) int { return -1 }, 0},
		{"rank1 off", func(r int) int { return map[bool]int{true: -1, false: 0}[r == 1] }, 1}, // 2->0 only
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := newGroups(t, "grpc", 3, func(c *Config) { c.SharedMemBytes = tc.shm(c.Rank) })
			for _, wire := range []Wire{WireF32, WireF16} {
				checkAllReduce(t, gs, 3<<18+5, Sum, wire, wire == WireF32)
				checkAllReduce(t, gs, 1000, Avg, wire, false)
			}
			if out, in := shmLinks(gs); out != tc.want || in != tc.want {
				t.Fatalf("%d outgoing and %d incoming links with a ring, want %d and %d", out, in, tc.want, tc.want)
			}
		})
	}
}

// A record the ring cannot hold (unknown kind, a frame crossing the lap's end or reaching past
// what was published, a skip at a lap's start, an empty frame) is a malformed frame naming the
// peer, not a read out of bounds.
func TestGRPCShm_badRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(r *shmRing, pos uint64) uint64 // writes at pos, returns the tail to publish
		expect string
	}{
		{"unknown kind", func(r *shmRing, pos uint64) uint64 { r.putRecord(pos, 9, 16); return pos + 24 }, "kind 9"},
		{"empty frame", func(r *shmRing, pos uint64) uint64 { r.putRecord(pos, recFrame, 0); return pos + 8 }, "frame of 0"},
		{"past the tail", func(r *shmRing, pos uint64) uint64 { r.putRecord(pos, recFrame, 64); return pos + 16 }, "published up to"},
		{"past the lap", func(r *shmRing, pos uint64) uint64 {
			r.putRecord(pos, recFrame, int(r.size))
			return pos + recHeader + r.size
		}, "ring"},
		{"skip at a lap's start", func(r *shmRing, pos uint64) uint64 {
			if pos%r.size != 0 {
				r.putRecord(pos, recSkip, 0)
				pos += r.size - pos%r.size
			}
			r.putRecord(pos, recSkip, 0)
			return pos + 8
		}, "start of a lap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := newGroups(t, "grpc", 2, func(c *Config) { c.SharedMemBytes = 4096 })
			noErrors(t, each(gs, func(g *Group) error { return g.Barrier(context.Background()) }))
			l, err := gs[0].tr.(*grpcTransport).link(1)
			if err != nil || l.shm == nil {
				t.Fatalf("link 0->1: %v (ring %v)", err, l != nil && l.shm != nil)
			}
			tail := tc.write(l.shm, l.tail)
			l.tail = tail
			l.shm.publish(tail)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = gs[1].tr.Recv(ctx, 0)
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, errShmFrame) ||
				!strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), tc.expect) {
				t.Fatalf("got %v, want a malformed-frame PeerError naming rank 0 (%q)", err, tc.expect)
			}
		})
	}
}

// Between processes: the ring is opened through /proc/PID/fd and orders the link
// (grpc), or the descriptor crosses the socket (tcp); a child process is rank 1.
func TestShm_acrossProcesses(t *testing.T) {
	if os.Getenv("GODDP_SHM_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, kind := range []string{"grpc", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			master := freeAddr(t)
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
	cfg := Config{Rank: rank, WorldSize: 2, MasterAddr: master, Token: "secret", Timeout: 20 * time.Second,
		Logger: quietLogger(), SharedMemBytes: 64 << 10, ChunkBytes: 16 << 10}
	if kind == "tcp" {
		cfg.TransportKind = TransportTCP
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := NewGroup(ctx, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	const size = 1<<20 + 3
	buf := make([]float32, size)
	for i := range buf {
		buf[i] = float32(i%1000 + rank*1000) // sums exact in f32
	}
	for _, wire := range []Wire{WireF32, WireF16} {
		b := append([]float32{}, buf...)
		if err := g.AllReduce(ctx, b, Sum, wire); err != nil {
			return fmt.Errorf("all-reduce over %s: %v", wire, err)
		}
		for i, v := range b {
			want := float32(2*(i%1000) + 1000)
			if wire == WireF16 {
				if math.Abs(float64(v-want)) > 0.002*float64(want) {
					return fmt.Errorf("%s: [%d] = %g, want about %g", wire, i, v, want)
				}
			} else if v != want {
				return fmt.Errorf("%s: [%d] = %g, want %g", wire, i, v, want)
			}
		}
	}
	if out, in := shmLinks([]*Group{g}); out != 1 || in != 1 {
		return fmt.Errorf("rank %d: %d outgoing and %d incoming links with a ring, want 1 and 1", rank, out, in)
	}
	return g.Barrier(ctx)
}

// FuzzShmRecord feeds arbitrary record headers at arbitrary positions and published tails to
// the receiver's check: a record is accepted only if its frame lies inside the ring and below
// the tail, and anything else is an error, never a panic or a view out of bounds.
// (go test -fuzz FuzzShmRecord ./allreduce/)
func FuzzShmRecord(f *testing.F) {
	r, file, err := newShmRing(3 * 4096) // not a power of two: positions near 2^64 do not wrap evenly
	if err != nil {
		f.Skipf("no shared memory here: %v", err)
	}
	file.Close()
	defer r.unmap()
	for _, c := range []struct {
		pos, tail uint64
		n, kind   uint32
	}{
		{0, 72, 64, recFrame}, {8, 16, 0, recSkip}, {12280, 12288, 0, recSkip}, {0, 8, 4096, recStream},
		{16, 24, 0, recFrame}, {0, 1 << 40, 1 << 31, recFrame}, {^uint64(0) - 15, ^uint64(0), 8, recFrame},
		{4096, 4200, 100, 7}, {12288, 12296, 0, recSkip},
	} {
		f.Add(c.pos, c.tail, c.n, c.kind)
	}
	f.Fuzz(func(t *testing.T, pos, tail uint64, n, kind uint32) {
		pos &^= 7 // the receiver only ever reads at multiples of 8
		if tail <= pos {
			return // nothing published: not read
		}
		r.putRecord(pos, kind, int(n))
		k, got, err := r.record(pos, tail)
		if err != nil {
			if !errors.Is(err, errShmFrame) {
				t.Fatalf("error %v is not errShmFrame", err)
			}
			return
		}
		if k != kind || (k != recSkip && uint32(got) != n) {
			t.Fatalf("record (%d, %d) read as (%d, %d)", kind, n, k, got)
		}
		if k == recFrame {
			if pos%r.size+recHeader+uint64(got) > r.size || recHeader+align8(got) > tail-pos {
				t.Fatalf("accepted a frame of %d bytes at %d, tail %d, ring %d", got, pos, tail, r.size)
			}
			v := r.at(pos+recHeader, got)
			off := uintptr(unsafe.Pointer(&v[0])) - uintptr(unsafe.Pointer(&r.data[0]))
			if off+uintptr(got) > uintptr(len(r.data)) {
				t.Fatalf("view [%d,+%d) outside the ring of %d", off, got, len(r.data))
			}
		}
	})
}
