package allreduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/half"
)

// Each 16-bit wire's kernels (Wire.kernels: assembly on amd64 with AVX2, and the portable Go
// bodies) against the scalar definitions of its format, on lengths that exercise vector bodies
// and tails, with specials mixed in (NaNs of both signs, signalling and with payloads).
func TestHalfWire_kernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 4))
	specials := []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3.4e38, -3.39e38, 65520, 1e-40, 6e-5,
		math.Float32frombits(0xff800001), math.Float32frombits(0x7fa00000), math.Float32frombits(0xffc12345), float32(math.Copysign(0, -1))}
	bf16Generic := halfKernels{encodeBF16Generic, half.DecodeBF16, addBF16Generic, addBF16RoundGeneric}
	for _, c := range []struct {
		w Wire
		f half.Format
		k *halfKernels // nil: Wire.kernels (assembly where the CPU has it)
	}{{WireF16, half.F16, nil}, {WireBF16, half.BF16, nil}, {WireBF16, half.BF16, &bf16Generic}} {
		k, ok := c.w.kernels()
		if !ok {
			t.Fatalf("%s has no kernels", c.w)
		}
		if c.k != nil {
			k = *c.k
		}
		for _, n := range []int{0, 1, 7, 8, 9, 33, 1000, 4097} {
			src, loc, h := make([]float32, n), make([]float32, n), make([]uint16, n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * 100)
				loc[i] = float32(rng.NormFloat64() * 100)
				if rng.IntN(10) == 0 {
					src[i] = specials[rng.IntN(len(specials))]
				}
				h[i] = c.f.FromFloat32(src[i])
			}
			for _, scale := range []float32{1, 0.25, 1.0 / 3} {
				got := make([]uint16, n)
				k.encode(got, src, scale)
				a, ar := append([]float32{}, loc...), append([]float32{}, loc...)
				k.add(a, h, scale)
				k.addRound(ar, h, scale)
				for i := range src {
					if w := c.f.FromFloat32(src[i] * scale); got[i] != w {
						t.Fatalf("%s encode n=%d scale=%g [%d]: %#04x want %#04x", c.w, n, scale, i, got[i], w)
					}
					w := c.f.ToFloat32(h[i]) + float32(loc[i]*scale)
					if !sameF32(a[i], w) {
						t.Fatalf("%s add n=%d [%d]: %g want %g", c.w, n, i, a[i], w)
					}
					if wr := c.f.ToFloat32(c.f.FromFloat32(w)); !sameF32(ar[i], wr) {
						t.Fatalf("%s addRound n=%d [%d]: %g want %g", c.w, n, i, ar[i], wr)
					}
				}
			}
			d := make([]float32, n)
			k.decode(d, h)
			for i := range d {
				if !sameF32(d[i], c.f.ToFloat32(h[i])) {
					t.Fatalf("%s decode [%d]: %g want %g", c.w, i, d[i], c.f.ToFloat32(h[i]))
				}
			}
		}
	}
	if _, ok := WireF32.kernels(); ok {
		t.Error("WireF32 has 16-bit kernels")
	}
}
