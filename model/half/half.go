// Package half is goddp's one codec of 16-bit floats, IEEE 754 binary16 ("half", f16) and
// bfloat16 (bf16.go): float32 ↔ f16/bf16 conversion of one value and of slices, for the CPU
// device, the tensors' host transfers, safetensors and the all-reduce's wire codecs; Format
// names either, for code written once for both. It imports nothing of goddp, so every package may use it (allreduce, which must not
// import model, included).
//
// The conversions match github.com/x448/float16 bit for bit (round to nearest even, subnormals
// kept, inf and NaN carried, a NaN staying a quiet NaN with its top payload bits; half_test.go
// checks every half and millions of float32s), but are written as branch-light loops because they
// run on every element of every f16 activation and every gradient sent. allreduce keeps F16C
// assembly versions of its slice kernels (allreduce/kernels_amd64.s), bit-identical to these and
// tested against them.
package half

import "math"

// Max is the largest finite half value.
const Max = 65504

// FromFloat32 rounds f to the nearest half (ties to even) and returns its bits. Branch-light
// (after F. Giesen's float_to_half_fast3_rtne): normals round by adding the rounding bias to the
// bits, subnormals let the FPU round by adding a magic 0.5.
func FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	u &= 0x7fffffff
	switch {
	case u >= 0x47800000: // |f| ≥ 2^16, inf or NaN
		if u > 0x7f800000 { // NaN: keep the top mantissa bits, quiet, never inf
			return sign | 0x7e00 | uint16(u>>13)&0x3ff
		}
		return sign | 0x7c00
	case u < 0x38800000: // |f| < 2^-14: a half subnormal or zero; the FPU rounds the add to even
		return sign | uint16(math.Float32bits(math.Float32frombits(u)+0.5)-0x3f000000)
	default: // a normal half, or a carry into the next binade (up to inf): correct rounding
		u += 0xc8000fff + (u>>13)&1 // rebias the exponent by −112 and add the round-to-even bias
		return sign | uint16(u>>13)
	}
}

// ToFloat32 widens half bits h to float32 exactly.
func ToFloat32(h uint16) float32 {
	return table[h]
}

// Table maps every half's bits to its float32 value (256 KiB; it stays in L2 in decode loops).
// Hot loops take it once, t := half.Table(), and index it with uint16s: no bounds checks.
// Read only.
func Table() *[1 << 16]float32 { return table }

var table = newTable(f16ToF32Slow)

// newTable tabulates widen over every 16-bit pattern (Table, BF16Table).
func newTable(widen func(uint16) float32) *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = widen(uint16(i))
	}
	return &t
}

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		if man != 0 { // NaN: widened as a quiet NaN, as x448/float16 does
			return math.Float32frombits(sign | 0x7fc00000 | man<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalise
		e := uint32(113)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	}
}

// Encode writes the half rounding of each src element into dst (len(dst) >= len(src)).
func Encode(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = FromFloat32(f)
	}
}

// Decode widens each half in src into dst (len(dst) >= len(src)).
func Decode(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	t := table
	for i, h := range src {
		dst[i] = t[h]
	}
}

// Round rounds each element of x to the nearest half value, in place (what a store to an f16
// tensor does to a float32 result).
func Round(x []float32) {
	t := table
	for i, f := range x {
		x[i] = t[FromFloat32(f)]
	}
}
