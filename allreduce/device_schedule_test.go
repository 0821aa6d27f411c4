package allreduce

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/goddp/goddp/model/half"
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

// The host ring's f16 reduce-scatter is SumF16 over ReduceOrder: for every owner and element of
// its segment, the ranks' half values added in ReduceOrder with a rounding to half after every
// addition give ReduceScatterF16's bits (Sum), for worlds of 1 to 5, odd lengths and chunks that
// split segments. The data is such that the order and the roundings matter: adding in another
// order, or rounding only once at the end, misses the ring's bits somewhere (else the test could
// not tell a device that gets either wrong).
func TestSumF16_isTheRingsReduceScatterF16(t *testing.T) {
	for n := 1; n <= 5; n++ {
		gs := newGroups(t, "inproc", n, func(c *Config) { c.ChunkBytes = 66 })
		for _, size := range []int{1, 7, 333, 2049} {
			in := inputs(n, size, uint64(n)*131+uint64(size), false)
			bufs := make([][]uint16, n)
			orig := make([][]uint16, n)
			for r := range n {
				for i := range in[r] {
					in[r][i] *= float32(int(1) << (i % 9)) // spread exponents: partial sums round
				}
				orig[r] = make([]uint16, size)
				encodeF16Generic(orig[r], in[r], 1)
				bufs[r] = append([]uint16(nil), orig[r]...)
			}
			noErrors(t, each(gs, func(g *Group) error { return g.ReduceScatterF16(context.Background(), bufs[g.Rank()], Sum) }))
			tab := half.Table()
			otherOrder, oneRounding := false, false
			vals := make([]uint16, n)
			for owner := range n {
				lo, hi := Segment(size, n, owner)
				order := ReduceOrder(n, owner)
				for i := lo; i < hi; i++ {
					for k, r := range order {
						vals[k] = orig[r][i]
					}
					if got, want := SumF16(vals), bufs[owner][i]; got != want {
						t.Fatalf("n=%d size %d [%d] (owner %d, order %v): SumF16 %#x, the ring %#x", n, size, i, owner, order, got, want)
					}
					slices.Reverse(vals)
					otherOrder = otherOrder || SumF16(vals) != bufs[owner][i]
					var s float32
					for _, v := range vals {
						s += tab[v]
					}
					oneRounding = oneRounding || half.FromFloat32(s) != bufs[owner][i]
				}
			}
			if n >= 3 && size > 300 && (!otherOrder || !oneRounding) {
				t.Errorf("n=%d size %d: the reverse order differs %v, one rounding at the end differs %v: want both (the data must tell them apart)", n, size, otherOrder, oneRounding)
			}
		}
	}
}
