package allreduce

import (
	"context"
	"math"
	"testing"

	"github.com/goddp/goddp/model/half"
)

// AllReduceBF16 over every transport: every rank ends with the same bf16 bits, the bits AllReduce
// with WireBF16 leaves in float32 buffers holding the same bf16 values, within bf16 rounding of the
// exact result (Sum and Avg).
func TestAllReduceBF16(t *testing.T) {
	for _, kind := range transportKinds {
		for _, n := range []int{1, 2, 3, 7} {
			if networked(kind) && n > 3 {
				continue
			}
			for _, op := range []Op{Sum, Avg} {
				gs := newGroups(t, kind, n, func(c *Config) { c.ChunkBytes = 1000 })
				size := 5003
				in := inputs(n, size, 9, false)
				bufs := make([][]uint16, n)
				ref := make([][]float32, n)
				for r := range bufs {
					bufs[r] = make([]uint16, size)
					half.EncodeBF16(bufs[r], in[r])
					ref[r] = make([]float32, size)
					half.DecodeBF16(ref[r], bufs[r])
				}
				noErrors(t, each(gs, func(g *Group) error { return g.AllReduceBF16(context.Background(), bufs[g.Rank()], op) }))
				noErrors(t, each(gs, func(g *Group) error { return g.AllReduce(context.Background(), ref[g.Rank()], op, WireBF16) }))
				var errSq, refSq float64
				for i := range size {
					for r := 1; r < n; r++ {
						if bufs[r][i] != bufs[0][i] {
							t.Fatalf("%s n=%d op %d: rank %d [%d] differs", kind, n, op, r, i)
						}
					}
					if got, want := half.BF16ToFloat32(bufs[0][i]), ref[0][i]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s n=%d op %d: [%d] = %g, AllReduce with WireBF16 gives %g", kind, n, op, i, got, want)
					}
					var s float64
					for r := range n {
						s += float64(half.BF16ToFloat32(half.BF16FromFloat32(in[r][i])))
					}
					if op == Avg {
						s /= float64(n)
					}
					d := float64(half.BF16ToFloat32(bufs[0][i])) - s
					errSq += d * d
					refSq += s * s
				}
				// bf16 keeps 8 significant bits: each of the n-1 additions rounds once (2⁻⁹ relative).
				if rel := math.Sqrt(errSq / refSq); rel > 8e-3 {
					t.Fatalf("%s n=%d op %d: relative L2 error %.2e", kind, n, op, rel)
				}
			}
		}
	}
}
