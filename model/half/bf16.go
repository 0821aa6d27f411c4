package half

import "math"

// bfloat16 ("brain float", bf16): the top 16 bits of a binary32, so f32's range (8 exponent bits)
// with 8 bits of precision. Narrowing rounds to nearest even, as PyTorch does; a NaN stays a
// quiet NaN (its sign and top payload bits kept; torch itself writes 0x7fc0 from its scalar path
// and 0xffff from its vector path, both NaNs); values past the largest bf16 round to ±Inf;
// subnormals are kept, never flushed. Widening is exact: the 16 bits shifted up.

// MaxBF16 is the largest finite bfloat16 value (0x7f7f).
const MaxBF16 = 0x1.fep127

// BF16FromFloat32 rounds f to the nearest bfloat16 (ties to even) and returns its bits.
func BF16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep the sign and the top payload, set the quiet bit
		return uint16(u>>16) | 0x40
	}
	// Round to nearest even by adding 0x7fff plus the lowest kept bit; a carry out of the mantissa
	// bumps the exponent, which is the correct rounding (up to Inf past MaxBF16).
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// BF16ToFloat32 widens bfloat16 bits b to float32 exactly.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// EncodeBF16 writes the bfloat16 rounding of each src element into dst (len(dst) >= len(src)).
func EncodeBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		x := math.Float32bits(f)
		r := uint16((x + 0x7fff + (x>>16)&1) >> 16)
		if x&0x7fffffff > 0x7f800000 {
			r = uint16(x>>16) | 0x40
		}
		dst[i] = r
	}
}

// DecodeBF16 widens each bfloat16 in src into dst (len(dst) >= len(src)).
func DecodeBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

// RoundBF16 rounds each element of x to the nearest bfloat16 value, in place (what a store to a
// bf16 tensor does to a float32 result).
func RoundBF16(x []float32) {
	for i, f := range x {
		v := math.Float32bits(f)
		r := (v + 0x7fff + (v>>16)&1) &^ 0xffff
		if v&0x7fffffff > 0x7f800000 {
			r = (v | 0x400000) &^ 0xffff
		}
		x[i] = math.Float32frombits(r)
	}
}

// BF16Table maps every bfloat16's bits to its float32 value, like Table for halves (256 KiB,
// read only): loops written once over a table serve both formats (Format.Table).
func BF16Table() *[1 << 16]float32 { return bf16Table }

var bf16Table = newTable(BF16ToFloat32)

// Format is one of the two 16-bit float formats, for code written once for both: the CPU
// device's f16 and bf16 tensors, the all-reduce's f16 and bf16 wires.
type Format uint8

const (
	F16  Format = iota // IEEE 754 binary16
	BF16               // bfloat16
)

func (f Format) String() string {
	if f == BF16 {
		return "bf16"
	}
	return "f16"
}

// FromFloat32 rounds v to the nearest value of the format (ties to even) and returns its bits.
func (f Format) FromFloat32(v float32) uint16 {
	if f == BF16 {
		return BF16FromFloat32(v)
	}
	return FromFloat32(v)
}

// ToFloat32 widens bits h of the format exactly.
func (f Format) ToFloat32(h uint16) float32 {
	if f == BF16 {
		return BF16ToFloat32(h)
	}
	return table[h]
}

// Encode, Decode and Round are the package's slice functions of the format.
func (f Format) Encode(dst []uint16, src []float32) {
	if f == BF16 {
		EncodeBF16(dst, src)
		return
	}
	Encode(dst, src)
}

func (f Format) Decode(dst []float32, src []uint16) {
	if f == BF16 {
		DecodeBF16(dst, src)
		return
	}
	Decode(dst, src)
}

func (f Format) Round(x []float32) {
	if f == BF16 {
		RoundBF16(x)
		return
	}
	Round(x)
}

// Table maps every bit pattern of the format to its float32 value (Table or BF16Table).
func (f Format) Table() *[1 << 16]float32 {
	if f == BF16 {
		return bf16Table
	}
	return table
}

// Max is the format's largest finite value.
func (f Format) Max() float32 {
	if f == BF16 {
		return MaxBF16
	}
	return Max
}
