package allreduce

import (
	"context"
	"fmt"
)

// The sharded step's halves on buffers of IEEE half bits (the staged GPU path under
// ddp.shard_optimizer: gradients and the f16 weights sit in pinned memory as half): the same
// rings as ReduceScatter and AllGatherSegments on the f16 wire, on the f16Buf AllReduceF16 uses.

// ReduceScatterF16 is ReduceScatter on half bits: afterwards rank r's segment [Segment(len(buf),
// Size(), r)) holds the half bits AllReduceF16 would leave there (additions in float32, each
// partial sum rounded to half on the wire); the rest of buf is scratch.
func (g *Group) ReduceScatterF16(ctx context.Context, buf []uint16, op Op) error {
	if op != Sum && op != Avg {
		return fmt.Errorf("allreduce: reduce-scatter: unknown op %d", op)
	}
	c, err := g.begin(ctx, kindReduceScatter)
	if c == nil {
		return err
	}
	return c.end(c.ring(&f16Buf{buf: buf}, op, WireF16, 0, g.size-1))
}

// AllGatherSegmentsF16 is AllGatherSegments on half bits: every rank's segment travels as its
// own bits (exact), and afterwards every rank holds every rank's segment.
func (g *Group) AllGatherSegmentsF16(ctx context.Context, buf []uint16) error {
	c, err := g.begin(ctx, kindAllGatherSegments)
	if c == nil {
		return err
	}
	return c.end(c.ring(&f16Buf{buf: buf}, Sum, WireF16, g.size-1, 2*(g.size-1)))
}
