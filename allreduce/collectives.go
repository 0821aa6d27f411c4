package allreduce

import (
	"context"
	"fmt"

	"github.com/goddp/goddp/allreduce/link"
)

// Broadcast copies root's buf into every rank's buf (same length everywhere), pipelined
// along the ring from root: each rank forwards a chunk as soon as it has it.
func (g *Group) Broadcast(ctx context.Context, buf []byte, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("allreduce: broadcast: root %d outside [0,%d)", root, g.size)
	}
	c, err := g.begin(ctx, kindBroadcast)
	if c == nil {
		return err
	}
	return c.end(c.broadcast(buf, root))
}

// BroadcastF32 is Broadcast of a float32 buffer (bit-exact).
func (g *Group) BroadcastF32(ctx context.Context, buf []float32, root int) error {
	return g.Broadcast(ctx, f32Bytes(buf), root)
}

func (c *collective) broadcast(buf []byte, root int) error {
	g := c.g
	n := len(buf)
	chunk := g.cfg.ChunkBytes
	chunks := numChunks(n, chunk)
	last := g.rank == ringPrev(root, g.size) // the end of the chain forwards nothing
	c.startSender()
	hdr := frameHeader{kind: kindBroadcast, wire: wireBytes, origin: root, seq: c.seq, count: uint64(n)}
	want := expect{kind: kindBroadcast, wire: wireBytes, count: uint64(n), origin: root}
	for k := range chunks {
		lo, hi := chunkRange(0, n, chunk, k)
		if g.rank != root {
			want.offset, want.n = uint64(lo), uint32(hi-lo)
			payload, _, err := c.recvFrame(&want)
			if err != nil {
				return err
			}
			copy(buf[lo:hi], payload)
		}
		if !last {
			h := hdr
			h.offset, h.n = uint64(lo), uint32(hi-lo)
			c.queue(sendJob{hdr: h, data: buf[lo:hi]})
		}
	}
	// The end of the chain tells the root it is done, so the root, too, learns of a failure or
	// a mismatch instead of returning before anyone has checked its frames.
	ack := expect{kind: kindBroadcast, wire: wireBytes, count: uint64(n), offset: uint64(n), aux: 1, origin: root}
	if last {
		h := hdr
		h.offset, h.aux = uint64(n), 1
		c.queue(sendJob{hdr: h})
	}
	c.finish()
	if g.rank == root {
		if _, _, err := c.recvFrame(&ack); err != nil {
			return err
		}
	}
	return nil
}

// AllGather returns every rank's send, indexed by rank (lengths may differ). The result's
// slices are fresh; out[g.Rank()] is a copy of send.
func (g *Group) AllGather(ctx context.Context, send []byte) ([][]byte, error) {
	c, err := g.begin(ctx, kindAllGather)
	if c == nil {
		if err != nil {
			return nil, err
		}
		return [][]byte{append([]byte{}, send...)}, nil
	}
	out, err := c.allGather(send)
	return out, c.end(err)
}

// Barrier returns once every rank has entered it (an all-gather of nothing).
func (g *Group) Barrier(ctx context.Context) error {
	c, err := g.begin(ctx, kindBarrier)
	if c == nil {
		return err
	}
	_, err = c.allGather(nil)
	return c.end(err)
}

// allGather passes blocks around the ring: at step s rank r sends block r-s and receives block
// r-s-1, forwarding it at the next step. Blocks go in chunks; the first frame of each gives its
// length (count), so lengths need not be known in advance.
func (c *collective) allGather(send []byte) ([][]byte, error) {
	g := c.g
	n, r := g.size, g.rank
	chunk := g.cfg.ChunkBytes
	out := make([][]byte, n)
	out[r] = append([]byte{}, send...)
	c.startSender()
	queueBlock := func(owner, step int, lo, hi int) {
		h := frameHeader{kind: c.kind, wire: wireBytes, origin: owner, seq: c.seq,
			count: uint64(len(out[owner])), offset: uint64(lo), n: uint32(hi - lo), aux: uint32(step)}
		c.queue(sendJob{hdr: h, data: out[owner][lo:hi]})
	}
	for k := range numChunks(len(send), chunk) {
		lo, hi := chunkRange(0, len(send), chunk, k)
		queueBlock(r, 0, lo, hi)
	}
	for s := 0; s < n-1; s++ {
		owner := mod(r-s-1, n)
		want := expect{kind: c.kind, wire: wireBytes, count: ^uint64(0), origin: owner}
		var block []byte
		for k, chunks := 0, 1; k < chunks; k++ {
			payload, h, err := c.recvFrame(&want)
			if err != nil {
				return nil, err
			}
			if k == 0 {
				if h.count > uint64(maxFramePayload)*64 {
					return nil, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("all-gather block of %d bytes is too large", h.count)}
				}
				block = make([]byte, h.count)
				out[owner] = block
				chunks = numChunks(len(block), chunk)
			}
			lo, hi := chunkRange(0, len(block), chunk, k)
			if h.count != uint64(len(block)) || h.offset != uint64(lo) || int(h.n) != hi-lo || h.aux != uint32(s) {
				return nil, &link.PeerError{Rank: c.prev, Err: fmt.Errorf("out of order: all-gather chunk [%d,+%d) of %d bytes step %d, expected [%d,%d) of %d step %d",
					h.offset, h.n, h.count, h.aux, lo, hi, len(block), s)}
			}
			copy(block[lo:hi], payload)
			if s < n-2 {
				queueBlock(owner, s+1, lo, hi)
			}
		}
	}
	c.finish()
	return out, nil
}
