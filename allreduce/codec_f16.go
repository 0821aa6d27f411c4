package allreduce

import "math"

// The f16 wire codec: IEEE 754 binary16, round to nearest even, subnormals kept, infinities and
// NaNs carried (a NaN stays a NaN: its top mantissa bits are kept and the quiet bit is set, as
// github.com/x448/float16 does; f16_test.go checks that bit for bit).
//
// The portable loops below are written so that the common case (a finite value in the normal
// half range) takes one predictable branch and no data-dependent ones; kernels_amd64.go swaps
// in F16C/AVX2 versions of the slice loops when the CPU has them.

// f32ToF16 rounds f to the nearest half (ties to even) and returns its bits.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	// Normal half range, 2^-14 <= |f| < 2^16, as one unsigned compare.
	if a-0x38800000 < 0x47800000-0x38800000 {
		// Rebias the exponent (-112<<23 mod 2^32) and round to nearest even in one add:
		// +0xfff rounds up past the halfway point, + the kept lowest bit breaks ties to even.
		// A carry out of the mantissa bumps the exponent, up to 0x7c00 (inf): correct rounding.
		a += 0xc8000fff + (a>>13)&1
		return sign | uint16(a>>13)
	}
	return sign | f32ToF16Rare(a)
}

// f32ToF16Rare handles |f| outside the normal half range; a is the float's bits without sign.
func f32ToF16Rare(a uint32) uint16 {
	switch {
	case a > 0x7f800000: // NaN: keep the top payload bits, force quiet
		return 0x7c00 | 0x0200 | uint16(a>>13)&0x3ff
	case a >= 0x47800000: // >= 2^16 or inf
		return 0x7c00
	default: // subnormal half or zero: let the FPU round (x + 0.5 aligns the mantissa, RNE)
		const magic = 126 << 23 // 0.5
		f := math.Float32frombits(a) + math.Float32frombits(magic)
		return uint16(math.Float32bits(f) - magic)
	}
}

// f16ToF32 widens half bits exactly.
func f16ToF32(h uint16) float32 { return f16Table[h] }

// f16Table maps every half to its float32 value (256 KiB, stays in L2 in the decode loops).
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32Slow(uint16(i))
	}
	return &t
}()

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man != 0: // NaN, widened quiet
		return math.Float32frombits(sign | 0x7fc00000 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value man * 2^-24, exact in float32
		f := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	}
}

// Slice kernels. Each has a portable Go body (…Generic) and may be replaced at init by an
// assembly version (kernels_amd64.go). They never allocate. dst and src have equal lengths.

var (
	// encodeF16 writes the half rounding of src*scale into dst.
	encodeF16 = encodeF16Generic
	// decodeF16 widens src into dst.
	decodeF16 = decodeF16Generic
	// addF16 does dst[i] = f16(src[i]) + dst[i]*scale (a reduce-scatter step, f32 local buffer).
	addF16 = addF16Generic
	// addF16Round does dst[i] = round16(f16(src[i]) + dst[i]*scale): the owner's last step, keeping
	// exactly the value it will send.
	addF16Round = addF16RoundGeneric
	// addF16F16 does dst[i] = f16(f32(src[i]) + f32(dst[i])*scale) on half buffers.
	addF16F16 = addF16F16Generic
)

func encodeF16Generic(dst []uint16, src []float32, scale float32) {
	dst = dst[:len(src)]
	if scale == 1 {
		for i, f := range src {
			dst[i] = f32ToF16(f)
		}
		return
	}
	for i, f := range src {
		dst[i] = f32ToF16(f * scale)
	}
}

func decodeF16Generic(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	t := f16Table
	for i, h := range src {
		dst[i] = t[h]
	}
}

func addF16Generic(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := f16Table
	for i, h := range src {
		dst[i] = t[h] + dst[i]*scale
	}
}

func addF16RoundGeneric(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := f16Table
	for i, h := range src {
		dst[i] = t[f32ToF16(t[h]+dst[i]*scale)]
	}
}

func addF16F16Generic(dst []uint16, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := f16Table
	for i, h := range src {
		dst[i] = f32ToF16(t[h] + t[dst[i]]*scale)
	}
}

// scaleF16 does dst[i] = f16(f32(src[i])*scale) (the first send of a pre-divided half buffer).
func scaleF16(dst, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := f16Table
	for i, h := range src {
		dst[i] = f32ToF16(t[h] * scale)
	}
}

// addF32 does dst[i] += src[i] (f32 wire).
var addF32 = addF32Generic

func addF32Generic(dst, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] += f
	}
}
