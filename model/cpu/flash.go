package cpu

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// The CPU device's FlashAttention is the reference the CUDA kernels are tested against: the same
// contract (q, k, v read from the packed qkv, y written with heads side by side, the log-sum-exp
// kept for the backward, probabilities recomputed from it), computed plainly in f32 one (batch,
// head) at a time. It is not the CPU's fast path: FlashAttentionFast is false, so attention layers
// on the CPU choose the materialised BatchedMatMul + Softmax path unless told otherwise.

func (c *Device) FlashAttentionFast(int, tensor.DType) bool { return false }

func (c *Device) FlashAttention(y, lse, qkv *tensor.Tensor, heads int, scale float32) {
	B, T, C, hs := tensor.FlashDims("FlashAttention", y, lse, qkv, heads)
	src := read(qkv)
	out := outBuf(y, false)
	L := f32s(lse)
	c.parallel(B*heads, 1, func(lo, hi int) {
		p := make([]float32, T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/heads, bh%heads
			row := func(t, part int) []float32 { return src[(b*T+t)*3*C+part*C+h*hs:][:hs] }
			for i := 0; i < T; i++ {
				q := row(i, 0)
				m := float32(math.Inf(-1))
				for j := 0; j <= i; j++ {
					p[j] = scale * dot32(q, row(j, 1))
					m = max(m, p[j])
				}
				var l float32
				for j := 0; j <= i; j++ {
					p[j] = float32(math.Exp(float64(p[j] - m)))
					l += p[j]
				}
				o := out[(b*T+i)*C+h*hs:][:hs]
				clear(o)
				for j := 0; j <= i; j++ {
					w := p[j] / l
					for d, v := range row(j, 2) {
						o[d] += w * v
					}
				}
				L[bh*T+i] = m + float32(math.Log(float64(l)))
			}
		}
	})
	commit(y, out)
}

func (c *Device) FlashAttentionBackward(dqkv, dy, qkv, y, lse *tensor.Tensor, heads int, scale float32) {
	B, T, C, hs := tensor.FlashDims("FlashAttentionBackward", y, lse, qkv, heads)
	if !tensor.SameShape(dqkv, qkv) || !tensor.SameShape(dy, y) {
		panic(fmt.Sprintf("cpu: FlashAttentionBackward: dqkv %s / qkv %s, dy %s / y %s", dqkv, qkv, dy, y))
	}
	tensor.FlashDims("FlashAttentionBackward", dy, lse, dqkv, heads)
	src, g, o := read(qkv), read(dy), read(y)
	out := outBuf(dqkv, false)
	L := f32s(lse)
	c.parallel(B*heads, 1, func(lo, hi int) {
		ds := make([]float32, T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/heads, bh%heads
			at := func(buf []float32, t, part int) []float32 { return buf[(b*T+t)*3*C+part*C+h*hs:][:hs] }
			for t := 0; t < T; t++ {
				for part := 0; part < 3; part++ {
					clear(at(out, t, part))
				}
			}
			for i := 0; i < T; i++ {
				q, dyi := at(src, i, 0), g[(b*T+i)*C+h*hs:][:hs]
				delta := dot32(dyi, o[(b*T+i)*C+h*hs:][:hs])
				dq := at(out, i, 0)
				for j := 0; j <= i; j++ {
					k, v := at(src, j, 1), at(src, j, 2)
					p := float32(math.Exp(float64(scale*dot32(q, k) - L[bh*T+i])))
					ds[j] = p * (dot32(dyi, v) - delta)
					dv := at(out, j, 2)
					for d := range dv {
						dv[d] += p * dyi[d]
					}
				}
				for j := 0; j <= i; j++ {
					k, dk := at(src, j, 1), at(out, j, 1)
					w := scale * ds[j]
					for d := range dq {
						dq[d] += w * k[d]
						dk[d] += w * q[d]
					}
				}
			}
		}
	})
	commit(dqkv, out)
}

func dot32(a, b []float32) float32 {
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}
