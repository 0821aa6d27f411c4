package allreduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

func TestF16Codec_allHalves(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := float16.Frombits(h).Float32()
		got := f16ToF32(h)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("f16ToF32(%#04x) = %#08x, x448 %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
		// Narrowing the widened value gives the same bits as x448 (the half itself, NaNs quieted).
		if g, w := f32ToF16(got), uint16(float16.Fromfloat32(got)); g != w {
			t.Fatalf("f32ToF16(f16ToF32(%#04x)) = %#04x, x448 %#04x", h, g, w)
		}
	}
}

func TestF16Codec_float32s(t *testing.T) {
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if g, w := f32ToF16(f), uint16(float16.Fromfloat32(f)); g != w {
			t.Fatalf("f32ToF16(%#08x = %g) = %#04x, x448 %#04x", b, f, g, w)
		}
	}
	// Around every half: the value, the midpoints to its neighbours (ties), one ulp either side.
	for i := range 1 << 15 {
		f := f16ToF32Slow(uint16(i))
		b := math.Float32bits(f)
		for _, d := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff} {
			for _, s := range []uint32{0, 0x80000000} {
				check((b + d) | s)
				check((b - d) | s)
			}
		}
	}
	// Subnormal-half and tiny float32 territory, densely.
	for b := uint32(0x33000000 - 4096); b < 0x38800000+4096; b += 97 {
		check(b)
		check(b | 0x80000000)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		check(rng.Uint32())
	}
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, -65520, 1e10, float32(math.Inf(1)), float32(math.Inf(-1)), 5.96e-8, 2.98e-8, 2.99e-8} {
		check(math.Float32bits(f))
	}
	for _, b := range []uint32{0x7f800001, 0x7fc00000, 0xffc00001, 0x7fbfffff, 0x7f802000, 0xff800001} {
		check(b) // NaNs: stay NaN
		if h := f32ToF16(math.Float32frombits(b)); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			t.Fatalf("NaN %#08x became %#04x", b, h)
		}
	}
}

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
			h[i] = f32ToF16(src[i])
			hl[i] = f32ToF16(loc[i])
		}
		for _, scale := range []float32{1, 0.25, 1.0 / 3} {
			got := make([]uint16, n)
			encodeF16(got, src, scale)
			for i := range src {
				if w := f32ToF16(src[i] * scale); got[i] != w {
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
				w := f16ToF32(h[i]) + loc[i]*scale
				if !sameF32(a[i], w) {
					t.Fatalf("addF16 n=%d [%d]: %g want %g", n, i, a[i], w)
				}
				if wr := f16ToF32(f32ToF16(w)); !sameF32(ar[i], wr) {
					t.Fatalf("addF16Round n=%d [%d]: %g want %g", n, i, ar[i], wr)
				}
				if wh := f32ToF16(f16ToF32(h[i]) + f16ToF32(hl[i])*scale); ah[i] != wh {
					t.Fatalf("addF16F16 n=%d [%d]: %#04x want %#04x", n, i, ah[i], wh)
				}
			}
		}
		d := make([]float32, n)
		decodeF16(d, h)
		for i := range d {
			if !sameF32(d[i], f16ToF32(h[i])) {
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
		h[i] = f32ToF16(f[i])
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
