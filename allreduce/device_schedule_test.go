package allreduce

import (
	"context"
	"fmt"
	"math"
	"testing"
)

func TestReduceOrder(t *testing.T) {
	if got := fmt.Sprint(ReduceOrder(4, 1)); got != "[2 3 0 1]" {
		t.Fatalf("ReduceOrder(4, 1) = %s, want [2 3 0 1]", got)
	}
	for n := 1; n <= 6; n++ {
		for r := range n {
			o := ReduceOrder(n, r)
			if o[len(o)-1] != r || o[0] != reduceScatterSendSeg(o[0], n, 0) || o[0] != ownedSeg(r, n) {
				t.Fatalf("n=%d rank %d: order %v does not start at the segment's first sender and end at its owner", n, r, o)
			}
		}
	}
}

// The host ring with the f32 wire adds in ReduceOrder: a sequential f32 sum of every rank's
// values in that order, over each rank's Segment, is the ring's result bit for bit (Sum, and Avg
// with one division by the world size). This is what lets a device all-reduce that adds in that
// order match the host ring exactly.
func TestReduceOrder_isTheRingsOrder(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5} {
		gs := newGroups(t, "inproc", n, func(c *Config) { c.ChunkBytes = 256 })
		for _, op := range []Op{Sum, Avg} {
			size := 1001
			in := inputs(n, size, uint64(n)+7, false)
			bufs := make([][]float32, n)
			for r := range bufs {
				bufs[r] = append([]float32{}, in[r]...)
			}
			noErrors(t, each(gs, func(g *Group) error { return g.AllReduce(context.Background(), bufs[g.Rank()], op, WireF32) }))
			for owner := range n {
				lo, hi := Segment(size, n, owner)
				order := ReduceOrder(n, owner)
				for i := lo; i < hi; i++ {
					s := in[order[0]][i]
					for _, r := range order[1:] {
						s += in[r][i]
					}
					if op == Avg {
						s /= float32(n)
					}
					if math.Float32bits(s) != math.Float32bits(bufs[0][i]) {
						t.Fatalf("n=%d %s [%d] (owner %d): ReduceOrder's sum %g, the ring's %g", n, op, i, owner, s, bufs[0][i])
					}
				}
			}
		}
	}
}
