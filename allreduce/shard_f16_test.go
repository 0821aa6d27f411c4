package allreduce

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// ReduceScatterF16 leaves each rank's segment with AllReduceF16's half bits, and
// AllGatherSegmentsF16 after it completes AllReduceF16's result on every rank, bit for bit.
func TestReduceScatterF16AllGatherF16_isAllReduceF16(t *testing.T) {
	for _, kind := range []string{"inproc", "tcp"} {
		worlds := []int{1, 2, 3, 4, 7}
		if networked(kind) {
			worlds = []int{2, 3}
		}
		for _, n := range worlds {
			gs := newGroups(t, kind, n, func(c *Config) { c.ChunkBytes = 1000 })
			for _, size := range []int{1, 5, 3*1027 + 1, 20011} {
				for _, op := range []Op{Sum, Avg} {
					t.Run(fmt.Sprintf("%s/n%d/size%d/%s", kind, n, size, op), func(t *testing.T) {
						in := inputs(n, size, uint64(n)*31+uint64(size), false)
						ar := make([][]uint16, n)
						rs := make([][]uint16, n)
						for r := range n {
							ar[r] = make([]uint16, size)
							encodeF16Generic(ar[r], in[r], 1)
							rs[r] = slices.Clone(ar[r])
						}
						ctx := context.Background()
						noErrors(t, each(gs, func(g *Group) error { return g.AllReduceF16(ctx, ar[g.Rank()], op) }))
						noErrors(t, each(gs, func(g *Group) error { return g.ReduceScatterF16(ctx, rs[g.Rank()], op) }))
						for r := range n {
							lo, hi := Segment(size, n, r)
							if i := firstDiffU16(rs[r][lo:hi], ar[r][lo:hi]); i >= 0 {
								t.Fatalf("rank %d: reduce-scatter's segment [%d,%d) differs from the all-reduce at %d: %#x vs %#x", r, lo, hi, lo+i, rs[r][lo+i], ar[r][lo+i])
							}
						}
						noErrors(t, each(gs, func(g *Group) error { return g.AllGatherSegmentsF16(ctx, rs[g.Rank()]) }))
						for r := range n {
							if i := firstDiffU16(rs[r], ar[r]); i >= 0 {
								t.Fatalf("rank %d: reduce-scatter + all-gather differs from the all-reduce at %d: %#x vs %#x", r, i, rs[r][i], ar[r][i])
							}
						}
					})
				}
			}
		}
	}
}

// firstDiffU16 is the first index where a and b differ, −1 if none.
func firstDiffU16(a, b []uint16) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
