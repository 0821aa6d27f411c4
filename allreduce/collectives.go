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

// GatherTo is AllGather for blocks that only some ranks need: rank r keeps them where keep[r]
// (keep has Size entries and is the same on every rank, as every argument of a collective is).
// It runs AllGather's ring — the same frames, the same bytes over every link, every rank taking
// part and failing as in any collective — but a rank that does not keep passes each block on
// without collecting it. Such a rank holds, besides the caller's send, at most the largest
// block's chunks plus one chunk (Config.ChunkBytes each) at any time, however many ranks there
// are, and returns Size entries that are nil but its own: out[Rank()] is send itself, not a
// copy. A rank that keeps gets what AllGather returns (fresh slices; out[Rank()] a copy of
// send). Only keep[Rank()] changes what a rank does: the frames are the same whatever keep says.
func (g *Group) GatherTo(ctx context.Context, send []byte, keep []bool) ([][]byte, error) {
	if len(keep) != g.size {
		return nil, fmt.Errorf("allreduce: gather-to on rank %d: keep has %d entries, the group %d ranks", g.rank, len(keep), g.size)
	}
	c, err := g.begin(ctx, kindGatherTo)
	if c == nil {
		if err != nil {
			return nil, err
		}
		if !keep[0] {
			return [][]byte{send}, nil
		}
		return [][]byte{append([]byte{}, send...)}, nil
	}
	if keep[g.rank] {
		out, err := c.allGather(send)
		return out, c.end(err)
	}
	err = c.forwardOnly(send)
	if err = c.end(err); err != nil {
		return nil, err
	}
	out := make([][]byte, g.size)
	out[g.rank] = send
	return out, nil
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

// forwardOnly is allGather on a rank that keeps no block (GatherTo): the same frames in the same
// order, but a chunk it receives is copied into a chunk buffer only until the sender has passed it
// on, and the buffer is then reused. What bounds the buffers is the receiver waiting on the
// sender: before chunk k of step s it waits until the sender has sent chunk k-1 of step s (all of
// step s once it has fewer chunks), so the chunks held are never more than the larger of the
// block being sent (received at step s-1) and the block being received, plus the one arriving.
//
// The wait cannot deadlock the ring, whatever the transports buffer: a sender's frame (s, k)
// needs only frames before it in (step, chunk) order — its own data, received at step s-1, and
// the next rank receiving, which waits at most for that rank's frame (s, k-1) — so by induction
// on (s, k) every rank gets through every frame. Without the wait (AllGather's unbounded send
// queue) a rank whose sender lags would queue whole blocks; without copying, a chunk would
// be overwritten by the next Recv (link.Transport's contract) before it is sent.
func (c *collective) forwardOnly(send []byte) error {
	g := c.g
	n, r := g.size, g.rank
	chunk := g.cfg.ChunkBytes
	c.sentSig = make(chan struct{}, 1) // before the sender starts: it reads it
	c.startSender()
	var queued int64 // data frames queued so far; the sender sends them in this order
	type held struct {
		frame int64 // its index among the data frames this rank sends
		b     []byte
	}
	var inFlight []held // chunk buffers queued for forwarding, oldest first
	var free [][]byte   // chunk buffers already sent, to reuse
	queueChunk := func(owner, step, count, lo, hi int, data []byte) {
		h := frameHeader{kind: c.kind, wire: wireBytes, origin: owner, seq: c.seq,
			count: uint64(count), offset: uint64(lo), n: uint32(hi - lo), aux: uint32(step)}
		c.queue(sendJob{hdr: h, data: data})
		queued++
	}
	// buffer returns a chunk buffer of need bytes, reusing one the sender is done with.
	buffer := func(need, size int) []byte {
		sent := c.sent.Load()
		for len(inFlight) > 0 && inFlight[0].frame < sent {
			free = append(free, inFlight[0].b)
			inFlight = inFlight[1:]
		}
		for len(free) > 0 {
			b := free[len(free)-1]
			free = free[:len(free)-1]
			if cap(b) >= need {
				return b[:need]
			}
		}
		return make([]byte, need, size)
	}
	// waitSent waits until the sender has sent the first target data frames.
	waitSent := func(target int64) error {
		if c.sent.Load() >= target {
			return nil
		}
		c.wait.Store(int64(c.next)) // the watchdog blames the rank that does not take them
		defer c.wait.Store(int64(c.prev))
		for c.sent.Load() < target {
			select {
			case <-c.sentSig:
			case <-c.ctx.Done():
				return context.Cause(c.ctx)
			}
		}
		return nil
	}
	sending := numChunks(len(send), chunk) // frames this rank sends at step s
	for k := range sending {
		lo, hi := chunkRange(0, len(send), chunk, k)
		queueChunk(r, 0, len(send), lo, hi, send[lo:hi])
	}
	var before int64 // frames this rank sends before step s
	for s := 0; s < n-1; s++ {
		owner := mod(r-s-1, n)
		forward := s < n-2 // the last step's block goes no further
		want := expect{kind: c.kind, wire: wireBytes, count: ^uint64(0), origin: owner}
		size, chunks := 0, 1
		for k := 0; k < chunks; k++ {
			if forward {
				if err := waitSent(before + int64(min(k, sending))); err != nil {
					return err
				}
			}
			payload, h, err := c.recvFrame(&want)
			if err != nil {
				return err
			}
			if k == 0 {
				if h.count > uint64(maxFramePayload)*64 {
					return &link.PeerError{Rank: c.prev, Err: fmt.Errorf("all-gather block of %d bytes is too large", h.count)}
				}
				size = int(h.count)
				chunks = numChunks(size, chunk)
			}
			lo, hi := chunkRange(0, size, chunk, k)
			if h.count != uint64(size) || h.offset != uint64(lo) || int(h.n) != hi-lo || h.aux != uint32(s) {
				return &link.PeerError{Rank: c.prev, Err: fmt.Errorf("out of order: all-gather chunk [%d,+%d) of %d bytes step %d, expected [%d,%d) of %d step %d",
					h.offset, h.n, h.count, h.aux, lo, hi, size, s)}
			}
			if forward {
				b := buffer(hi-lo, min(chunk, size))
				copy(b, payload)
				inFlight = append(inFlight, held{frame: queued, b: b})
				queueChunk(owner, s+1, size, lo, hi, b)
			}
		}
		before += int64(sending)
		sending = chunks // step s+1 sends the block received at step s
	}
	c.finish()
	return nil
}
