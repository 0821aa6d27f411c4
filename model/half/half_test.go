package half

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// The conversions must agree with x448/float16 on every half and on float32s of every kind.
func TestF16_matchesX448(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := math.Float32bits(ToFloat32(h))
		want := math.Float32bits(float16.Frombits(h).Float32())
		if got != want {
			t.Fatalf("ToFloat32(%#04x) = %#08x, x448 says %#08x", h, got, want)
		}
	}
	check := func(f float32) {
		got := FromFloat32(f)
		want := float16.Fromfloat32(f).Bits()
		if got != want {
			t.Fatalf("FromFloat32(%g bits %#08x) = %#04x, x448 says %#04x", f, math.Float32bits(f), got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2_000_000; i++ {
		check(math.Float32frombits(r.Uint32())) // every exponent, NaNs included
	}
	for i := 0; i < 1<<16; i++ { // halfway points and their neighbours around every half
		f := ToFloat32(uint16(i))
		b := math.Float32bits(f)
		for d := -4097; d <= 4097; d += 4096 / 4 {
			check(math.Float32frombits(uint32(int64(b) + int64(d))))
		}
	}
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, -65520, 1e-8, 5.96e-8, 2.98e-8, 2.9802326e-08, float32(math.Inf(1)), float32(math.Inf(-1))} {
		check(f)
	}
}

// From allreduce's codec tests: every half, and the float32s around every half.
func TestToFloat32_allHalves(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := float16.Frombits(h).Float32()
		got := ToFloat32(h)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("ToFloat32(%#04x) = %#08x, x448 %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
		// Narrowing the widened value gives the same bits as x448 (the half itself, NaNs quieted).
		if g, w := FromFloat32(got), uint16(float16.Fromfloat32(got)); g != w {
			t.Fatalf("FromFloat32(ToFloat32(%#04x)) = %#04x, x448 %#04x", h, g, w)
		}
	}
}

func TestFromFloat32_float32s(t *testing.T) {
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if g, w := FromFloat32(f), uint16(float16.Fromfloat32(f)); g != w {
			t.Fatalf("FromFloat32(%#08x = %g) = %#04x, x448 %#04x", b, f, g, w)
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
		if h := FromFloat32(math.Float32frombits(b)); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			t.Fatalf("NaN %#08x became %#04x", b, h)
		}
	}
}

func TestF16_nanStaysNaN(t *testing.T) {
	for _, b := range []uint32{0x7f800001, 0x7fc00000, 0xffffffff, 0x7f802000} {
		h := FromFloat32(math.Float32frombits(b))
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			t.Fatalf("NaN %#08x became %#04x, not a NaN", b, h)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	src := make([]float32, 1<<20)
	for i := range src {
		src[i] = float32(i%1000) * 0.37
	}
	dst := make([]uint16, len(src))
	b.SetBytes(int64(len(src) * 4))
	for b.Loop() {
		Encode(dst, src)
	}
}

func BenchmarkDecode(b *testing.B) {
	src := make([]uint16, 1<<20)
	for i := range src {
		src[i] = FromFloat32(float32(i%1000) * 0.37)
	}
	dst := make([]float32, len(src))
	b.SetBytes(int64(len(src) * 4))
	for b.Loop() {
		Decode(dst, src)
	}
}
