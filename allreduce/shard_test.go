package allreduce

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
)

// The segments of all ranks tile the buffer, in rank order around the ring's owned segments,
// sizes within one of each other.
func TestSegment_tiles(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4, 7, 16} {
		for _, n := range []int{0, 1, 5, 16, 1000, 1027} {
			owner := make([]int, n)
			for i := range owner {
				owner[i] = -1
			}
			small, big := n, 0
			for r := range size {
				lo, hi := Segment(n, size, r)
				if lo < 0 || hi > n || lo > hi {
					t.Fatalf("n=%d size=%d rank %d: segment [%d,%d)", n, size, r, lo, hi)
				}
				small, big = min(small, hi-lo), max(big, hi-lo)
				for i := lo; i < hi; i++ {
					if owner[i] >= 0 {
						t.Fatalf("n=%d size=%d: element %d owned by ranks %d and %d", n, size, i, owner[i], r)
					}
					owner[i] = r
				}
			}
			if slices.Contains(owner, -1) || big-small > 1 {
				t.Fatalf("n=%d size=%d: segments do not tile evenly: %v", n, size, owner)
			}
		}
	}
}

// ReduceScatter then AllGatherSegments is AllReduce, bit for bit, and ReduceScatter alone
// leaves each rank's segment as AllReduce leaves it.
func TestReduceScatterAllGather_isAllReduce(t *testing.T) {
	for _, kind := range []string{"inproc", "tcp"} {
		worlds := []int{1, 2, 3, 4, 7}
		if networked(kind) {
			worlds = []int{2, 3}
		}
		for _, n := range worlds {
			gs := newGroups(t, kind, n, func(c *Config) { c.ChunkBytes = 4096 })
			for _, size := range []int{1, 5, 1000, 3*1027 + 1, 100003} {
				for _, wire := range []Wire{WireF32, WireF16, WireBF16} {
					for _, op := range []Op{Sum, Avg} {
						t.Run(fmt.Sprintf("%s/n%d/size%d/%s/%s", kind, n, size, wire, op), func(t *testing.T) {
							checkShardedIsAllReduce(t, gs, size, op, wire)
						})
					}
				}
			}
		}
	}
}

func checkShardedIsAllReduce(t *testing.T, gs []*Group, size int, op Op, wire Wire) {
	n := len(gs)
	in := inputs(n, size, uint64(n)*17+uint64(wire), false)
	ar := make([][]float32, n)
	rs := make([][]float32, n)
	for r := range n {
		ar[r] = slices.Clone(in[r])
		rs[r] = slices.Clone(in[r])
	}
	ctx := context.Background()
	noErrors(t, each(gs, func(g *Group) error { return g.AllReduce(ctx, ar[g.Rank()], op, wire) }))
	noErrors(t, each(gs, func(g *Group) error { return g.ReduceScatter(ctx, rs[g.Rank()], op, wire) }))
	for r := range n {
		lo, hi := Segment(size, n, r)
		if i, ok := firstDiff(rs[r][lo:hi], ar[r][lo:hi]); !ok {
			t.Fatalf("rank %d: reduce-scatter's segment [%d,%d) differs from all-reduce at %d: %v vs %v", r, lo, hi, lo+i, rs[r][lo+i], ar[r][lo+i])
		}
	}
	noErrors(t, each(gs, func(g *Group) error { return g.AllGatherSegments(ctx, rs[g.Rank()], wire) }))
	for r := range n {
		if i, ok := firstDiff(rs[r], ar[r]); !ok {
			t.Fatalf("rank %d: reduce-scatter + all-gather differs from all-reduce at %d: %v vs %v", r, i, rs[r][i], ar[r][i])
		}
	}
}

// firstDiff compares bit patterns; it returns the first index that differs and false.
func firstDiff(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, len(a) == len(b)
}

// The halves are collectives of their own: a rank in ReduceScatter and one in AllReduce fail
// with a mismatch instead of exchanging frames.
func TestReduceScatter_mismatchedWithAllReduce(t *testing.T) {
	gs := newGroups(t, "inproc", 2, nil)
	errs := each(gs, func(g *Group) error {
		buf := make([]float32, 100)
		if g.Rank() == 0 {
			return g.ReduceScatter(context.Background(), buf, Sum, WireF32)
		}
		return g.AllReduce(context.Background(), buf, Sum, WireF32)
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error", r)
		}
	}
}
