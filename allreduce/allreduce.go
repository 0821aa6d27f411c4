package allreduce

import (
	"context"
	"fmt"
	"unsafe"
)

// AllReduce reduces buf across all ranks in place: afterwards every rank holds the same
// (bit-identical) sum, or average, of every rank's buf. wire says how values travel; with
// WireF16 (WireBF16) each hop rounds partial sums to half (bfloat16) while adding in float32,
// and the result is a half (bfloat16) value, stored as float32. buf's length, op and wire must match on every rank.
func (g *Group) AllReduce(ctx context.Context, buf []float32, op Op, wire Wire) error {
	if !wire.float() {
		return fmt.Errorf("allreduce: all-reduce: unsupported wire %s", wire)
	}
	return g.allReduce(ctx, &f32Buf{buf: buf, wire: wire}, op, wire)
}

// AllReduceF16 reduces a buffer of IEEE half bits in place (e.g. gradients staged from a GPU,
// already multiplied by AvgScale before their cast to half, with op Sum: Avg's arithmetic). Additions happen in float32; each partial sum
// is rounded to half as it goes on the wire, and every rank ends with the same half bits.
func (g *Group) AllReduceF16(ctx context.Context, buf []uint16, op Op) error {
	return g.allReduce(ctx, &f16Buf{buf: buf}, op, WireF16)
}

func (g *Group) allReduce(ctx context.Context, rb reduceBuf, op Op, wire Wire) error {
	if op != Sum && op != Avg {
		return fmt.Errorf("allreduce: all-reduce: unknown op %d", op)
	}
	c, err := g.begin(ctx, kindAllReduce)
	if c == nil {
		return err
	}
	return c.end(c.ring(rb, op, wire, 0, 2*(g.size-1)))
}

// ReduceScatter is the first half of AllReduce, a collective of its own: afterwards rank r's
// segment of buf, [Segment(len(buf), Size(), r)), holds the sum (or average) of every rank's
// values there, bit-identical to what AllReduce would leave in it; the rest of buf is scratch
// (partial sums). buf's length, op and wire must match on every rank.
func (g *Group) ReduceScatter(ctx context.Context, buf []float32, op Op, wire Wire) error {
	if !wire.float() {
		return fmt.Errorf("allreduce: reduce-scatter: unsupported wire %s", wire)
	}
	if op != Sum && op != Avg {
		return fmt.Errorf("allreduce: reduce-scatter: unknown op %d", op)
	}
	c, err := g.begin(ctx, kindReduceScatter)
	if c == nil {
		return err
	}
	return c.end(c.ring(&f32Buf{buf: buf, wire: wire}, op, wire, 0, g.size-1))
}

// AllGatherSegments is the second half of AllReduce, a collective of its own: every rank
// contributes its segment of buf, [Segment(len(buf), Size(), rank)), and afterwards every rank
// holds every segment. After ReduceScatter with the same wire it leaves buf bit-identical to
// AllReduce. With WireF16 (WireBF16) the segments travel as half (bfloat16) values: a segment
// that is not already of that precision (as ReduceScatter's result is) is rounded on the other
// ranks but not on its owner. buf's length and wire must match on every rank.
func (g *Group) AllGatherSegments(ctx context.Context, buf []float32, wire Wire) error {
	if !wire.float() {
		return fmt.Errorf("allreduce: all-gather of segments: unsupported wire %s", wire)
	}
	c, err := g.begin(ctx, kindAllGatherSegments)
	if c == nil {
		return err
	}
	return c.end(c.ring(&f32Buf{buf: buf, wire: wire}, Sum, wire, g.size-1, 2*(g.size-1)))
}

// Segment is the element range [lo, hi) of an n-element buffer that rank owns in a world of
// size ranks: the one ReduceScatter leaves reduced on it and AllGatherSegments takes from it
// (the ring's owned segment, ring.go). The segments of all ranks tile [0, n); their sizes differ
// by at most one.
func Segment(n, size, rank int) (lo, hi int) {
	return segment(n, size, ownedSeg(rank, size))
}

// AvgScale is what Avg multiplies every rank's contribution by before the f16 cast: 1/size. A
// caller that casts to half itself (the staged GPU path) multiplies by it before its cast and
// then all-reduces with Sum (AllReduceF16), which is Avg's arithmetic on the f16 wire.
func AvgScale(size int) float32 { return 1 / float32(size) }

// ring runs steps [from, to) of the ring all-reduce (ring.go), pipelined by chunks: steps
// 0..n-2 are reduce-scatter, n-1..2n-3 all-gather (the step is aux on the wire). All-reduce runs
// them all at once, so each chunk is forwarded the moment it is reduced; ReduceScatter and
// AllGatherSegments run one half each.
func (c *collective) ring(rb reduceBuf, op Op, wire Wire, from, to int) error {
	g := c.g
	n, r := g.size, g.rank
	count := rb.len()
	chunk := max(1, g.cfg.ChunkBytes/wire.elemSize())
	c.startSender()

	// With a 16-bit wire, Avg divides every rank's contribution before it is cast (scale); with
	// f32 the owner divides the full sum (rb.reduce, final step).
	scale, div := float32(1), float32(1)
	if op == Avg {
		if _, h16 := wire.kernels(); h16 {
			scale = AvgScale(n)
		} else {
			div = float32(n)
		}
	}
	hdr := frameHeader{kind: c.kind, wire: wire, op: op, origin: r, seq: c.seq, count: uint64(count)}
	send := func(lo, hi, step int, sc float32) {
		h := hdr
		h.offset, h.n, h.aux = uint64(lo), uint32(hi-lo), uint32(step)
		c.queue(sendJob{hdr: h, rb: rb, lo: lo, scale: sc})
	}
	want := expect{kind: c.kind, wire: wire, op: op, count: uint64(count), origin: -1}

	// The first step sends this rank's own values: at reduce-scatter step 0 its segment
	// (scaled), at all-gather step 0 the segment it owns.
	seg, sc := reduceScatterSendSeg(r, n, 0), scale
	if from == n-1 {
		seg, sc = allGatherSendSeg(r, n, 0), 1
	}
	lo, hi := segment(count, n, seg)
	for k := range numChunks(hi-lo, chunk) {
		clo, chi := chunkRange(lo, hi, chunk, k)
		send(clo, chi, from, sc)
	}
	for s := from; s < to; s++ {
		var seg int
		if s < n-1 {
			seg = reduceScatterRecvSeg(r, n, s)
		} else {
			seg = allGatherRecvSeg(r, n, s-(n-1))
		}
		lo, hi := segment(count, n, seg)
		for k := range numChunks(hi-lo, chunk) {
			clo, chi := chunkRange(lo, hi, chunk, k)
			want.offset, want.n, want.aux = uint64(clo), uint32(chi-clo), uint32(s)
			payload, _, err := c.recvFrame(&want)
			if err != nil {
				return err
			}
			switch {
			case s < n-1: // add ours; the last step leaves this rank owning the segment
				rb.reduce(payload, clo, chi, scale, s == n-2, div)
			default:
				rb.store(payload, clo, chi)
			}
			if s < to-1 {
				send(clo, chi, s+1, 1)
			}
		}
	}
	c.finish()
	return nil
}

// reduceBuf is the local buffer of an all-reduce: how its elements go to and come from the wire.
type reduceBuf interface {
	len() int
	// encode writes elements [lo,hi), times scale, in the wire format into dst.
	encode(dst []byte, lo, hi int, scale float32)
	// reduce does local = wire + local*scale on [lo,hi); final (the owner's last step) also
	// rounds to the wire precision and divides by div, so the owner keeps what it will send.
	reduce(src []byte, lo, hi int, scale float32, final bool, div float32)
	// store does local = wire on [lo,hi).
	store(src []byte, lo, hi int)
}

// f32Buf is a float32 buffer with any float wire (f32, f16, bf16).
type f32Buf struct {
	buf  []float32
	wire Wire
}

func (b *f32Buf) len() int { return len(b.buf) }

func (b *f32Buf) encode(dst []byte, lo, hi int, scale float32) {
	if k, ok := b.wire.kernels(); ok {
		k.encode(asU16(dst), b.buf[lo:hi], scale)
		return
	}
	copy(dst, f32Bytes(b.buf[lo:hi])) // scale is 1 with the f32 wire
}

func (b *f32Buf) reduce(src []byte, lo, hi int, scale float32, final bool, div float32) {
	x := b.buf[lo:hi]
	if k, ok := b.wire.kernels(); ok {
		if final {
			k.addRound(x, asU16(src), scale)
		} else {
			k.add(x, asU16(src), scale)
		}
		return
	}
	addF32(x, asF32(src))
	if final && div != 1 {
		for i := range x {
			x[i] /= div
		}
	}
}

func (b *f32Buf) store(src []byte, lo, hi int) {
	if k, ok := b.wire.kernels(); ok {
		k.decode(b.buf[lo:hi], asU16(src))
		return
	}
	copy(f32Bytes(b.buf[lo:hi]), src)
}

// f16Buf is a buffer of half bits (wire f16).
type f16Buf struct{ buf []uint16 }

func (b *f16Buf) len() int { return len(b.buf) }

func (b *f16Buf) encode(dst []byte, lo, hi int, scale float32) {
	if scale == 1 {
		copy(dst, u16Bytes(b.buf[lo:hi]))
		return
	}
	scaleF16(asU16(dst), b.buf[lo:hi], scale)
}

func (b *f16Buf) reduce(src []byte, lo, hi int, scale float32, final bool, div float32) {
	addF16F16(b.buf[lo:hi], asU16(src), scale)
}

func (b *f16Buf) store(src []byte, lo, hi int) { copy(u16Bytes(b.buf[lo:hi]), src) }

// Views between byte payloads and element slices (little-endian hosts: the wire is
// little-endian and these reinterpret memory).
func asU16(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

func asF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

func u16Bytes(x []uint16) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 2*len(x))
}
