package model

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
		got := math.Float32bits(F16ToF32(h))
		want := math.Float32bits(float16.Frombits(h).Float32())
		if got != want {
			t.Fatalf("F16ToF32(%#04x) = %#08x, x448 says %#08x", h, got, want)
		}
	}
	check := func(f float32) {
		got := F32ToF16(f)
		want := float16.Fromfloat32(f).Bits()
		if got != want {
			t.Fatalf("F32ToF16(%g bits %#08x) = %#04x, x448 says %#04x", f, math.Float32bits(f), got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2_000_000; i++ {
		check(math.Float32frombits(r.Uint32())) // every exponent, NaNs included
	}
	for i := 0; i < 1<<16; i++ { // halfway points and their neighbours around every half
		f := F16ToF32(uint16(i))
		b := math.Float32bits(f)
		for d := -4097; d <= 4097; d += 4096 / 4 {
			check(math.Float32frombits(uint32(int64(b) + int64(d))))
		}
	}
	for _, f := range []float32{0, -0.0, 65504, 65519.99, 65520, -65520, 1e-8, 5.96e-8, 2.98e-8, 2.9802326e-08, float32(math.Inf(1)), float32(math.Inf(-1))} {
		check(f)
	}
}

func TestF16_nanStaysNaN(t *testing.T) {
	for _, b := range []uint32{0x7f800001, 0x7fc00000, 0xffffffff, 0x7f802000} {
		h := F32ToF16(math.Float32frombits(b))
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			t.Fatalf("NaN %#08x became %#04x, not a NaN", b, h)
		}
	}
}

func BenchmarkEncodeF16(b *testing.B) {
	src := make([]float32, 1<<20)
	for i := range src {
		src[i] = float32(i%1000) * 0.37
	}
	dst := make([]uint16, len(src))
	b.SetBytes(int64(len(src) * 4))
	for b.Loop() {
		EncodeF16(dst, src)
	}
}
