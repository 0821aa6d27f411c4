package allreduce

import (
	"context"

	"github.com/goddp/goddp/model/half"
)

// AllReduceBF16 is AllReduceF16 for a buffer of bfloat16 bits (wire bf16): e.g. gradients staged
// from a GPU under `ddp.wire: bf16`, already multiplied by AvgScale before their cast, with op
// Sum. Additions happen in float32, each partial sum is rounded to bf16 as it goes on the wire,
// and every rank ends with the same bf16 bits, those AllReduce with WireBF16 leaves (as float32)
// when given the same bf16 values.
func (g *Group) AllReduceBF16(ctx context.Context, buf []uint16, op Op) error {
	return g.allReduce(ctx, &bf16Buf{buf: buf}, op, WireBF16)
}

// bf16Buf is a buffer of bfloat16 bits (wire bf16).
type bf16Buf struct{ buf []uint16 }

func (b *bf16Buf) len() int { return len(b.buf) }

func (b *bf16Buf) encode(dst []byte, lo, hi int, scale float32) {
	if scale == 1 {
		copy(dst, u16Bytes(b.buf[lo:hi]))
		return
	}
	d := asU16(dst)[:hi-lo]
	for i, h := range b.buf[lo:hi] {
		d[i] = half.BF16FromFloat32(half.BF16ToFloat32(h) * scale)
	}
}

// reduce does buf = bf16(f32(src) + f32(buf)·scale), the multiply and the add separate roundings
// (as the bf16 wire's other kernels).
func (b *bf16Buf) reduce(src []byte, lo, hi int, scale float32, final bool, div float32) {
	s := asU16(src)[:hi-lo]
	d := b.buf[lo:hi]
	for i, h := range s {
		d[i] = half.BF16FromFloat32(half.BF16ToFloat32(h) + float32(half.BF16ToFloat32(d[i])*scale))
	}
}

func (b *bf16Buf) store(src []byte, lo, hi int) { copy(u16Bytes(b.buf[lo:hi]), src) }
