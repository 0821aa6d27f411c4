package allreduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/half"
)

// The slice kernels (possibly assembly) against the scalar definitions, on lengths that
// exercise vector bodies and tails, with specials mixed in.
func TestF16Codec_kernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	specials := []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 65519, 65520, 1e-7, -3e-8, 6e-5}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000, 4097} {
		src := make([]float32, n)
		loc := make([]float32, n)
		h := make([]uint16, n)
		hl := make([]uint16, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 100)
			loc[i] = float32(rng.NormFloat64() * 100)
			if rng.IntN(10) == 0 {
				src[i] = specials[rng.IntN(len(specials))]
			}
			h[i] = half.FromFloat32(src[i])
			hl[i] = half.FromFloat32(loc[i])
		}
		for _, scale := range []float32{1, 0.25, 1.0 / 3} {
			got := make([]uint16, n)
			encodeF16(got, src, scale)
			for i := range src {
				if w := half.FromFloat32(src[i] * scale); got[i] != w {
					t.Fatalf("encodeF16 n=%d scale=%g [%d]: %#04x want %#04x", n, scale, i, got[i], w)
				}
			}
			a := append([]float32{}, loc...)
			addF16(a, h, scale)
			ar := append([]float32{}, loc...)
			addF16Round(ar, h, scale)
			ah := append([]uint16{}, hl...)
			addF16F16(ah, h, scale)
			for i := range a {
				w := half.ToFloat32(h[i]) + loc[i]*scale
				if !sameF32(a[i], w) {
					t.Fatalf("addF16 n=%d [%d]: %g want %g", n, i, a[i], w)
				}
				if wr := half.ToFloat32(half.FromFloat32(w)); !sameF32(ar[i], wr) {
					t.Fatalf("addF16Round n=%d [%d]: %g want %g", n, i, ar[i], wr)
				}
				if wh := half.FromFloat32(half.ToFloat32(h[i]) + half.ToFloat32(hl[i])*scale); ah[i] != wh {
					t.Fatalf("addF16F16 n=%d [%d]: %#04x want %#04x", n, i, ah[i], wh)
				}
			}
		}
		d := make([]float32, n)
		decodeF16(d, h)
		for i := range d {
			if !sameF32(d[i], half.ToFloat32(h[i])) {
				t.Fatalf("decodeF16 n=%d [%d]", n, i)
			}
		}
	}
}

// sameF32 is bit equality, any NaN equal to any NaN.
func sameF32(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

func benchData(n int) ([]float32, []uint16) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := make([]float32, n)
	h := make([]uint16, n)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
		h[i] = half.FromFloat32(f[i])
	}
	return f, h
}

const benchN = 1 << 20

func BenchmarkEncodeF16(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		encodeF16(h, f, 1)
	}
}

func BenchmarkEncodeF16Generic(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		encodeF16Generic(h, f, 1)
	}
}

func BenchmarkDecodeF16(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		decodeF16(f, h)
	}
}

func BenchmarkAddF16(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		addF16(f, h, 1)
	}
}

func BenchmarkAddF16Round(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		addF16Round(f, h, 0.5)
	}
}

func BenchmarkAddF16Generic(b *testing.B) {
	f, h := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		addF16Generic(f, h, 1)
	}
}

func BenchmarkAddF32(b *testing.B) {
	f, _ := benchData(benchN)
	g, _ := benchData(benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		addF32(f, g)
	}
}

// BenchmarkKernelsDRAM runs the kernels over 64 MiB of f32 (32 MiB of f16), far beyond the
// caches, as they run inside a large all-reduce: there they stream from memory, and memory
// bandwidth, not the F16C arithmetic, sets their speed. MB/s counts f32 bytes as above; copy is
// a plain copy of the f32 buffer, for scale.
func BenchmarkKernelsDRAM(b *testing.B) {
	const n = 16 << 20
	f, h := benchData(n)
	g := make([]float32, n)
	for _, k := range []struct {
		name string
		run  func()
	}{
		{"encode", func() { encodeF16(h, f, 1) }},
		{"decode", func() { decodeF16(g, h) }},
		{"add", func() { addF16(f, h, 0) }}, // scale 0 keeps the data from growing
		{"addRound", func() { addF16Round(f, h, 0) }},
		{"copy", func() { copy(g, f) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				k.run()
			}
		})
	}
}
