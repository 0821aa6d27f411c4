package allreduce

import "github.com/goddp/goddp/model/half"

// The bf16 wire codec: bfloat16 (the top 16 bits of a float32, round to nearest even, inf and
// NaN carried, overflow to inf), converted by model/half's one bf16 conversion. It works as the
// f16 wire does: partial sums are added in float32 and rounded to bf16 as they go on the wire,
// Avg scales each contribution before its cast, the owner of a segment keeps exactly the rounded
// value it sends, so every rank ends bit-identical. Like the f16 kernels, each has a portable Go
// body (…Generic) that kernels_amd64.go replaces with an AVX2 version where the CPU has it,
// bit-identical (codec_bf16_test.go checks both).

// halfKernels are a 16-bit wire's slice kernels, for code written once for f16 and bf16.
type halfKernels struct {
	encode   func(dst []uint16, src []float32, scale float32) // dst = wire(src*scale)
	decode   func(dst []float32, src []uint16)                // dst = f32(src)
	add      func(dst []float32, src []uint16, scale float32) // dst = f32(src) + dst*scale
	addRound func(dst []float32, src []uint16, scale float32) // dst = round(f32(src) + dst*scale)
}

// kernels is w's kernels (the f16 ones as installed at init: assembly where the CPU has F16C);
// ok is false for a wire that is not 16-bit float.
func (w Wire) kernels() (k halfKernels, ok bool) {
	switch w {
	case WireF16:
		return halfKernels{encodeF16, decodeF16, addF16, addF16Round}, true
	case WireBF16:
		return halfKernels{encodeBF16, decodeBF16, addBF16, addBF16Round}, true
	}
	return halfKernels{}, false
}

var (
	encodeBF16   = encodeBF16Generic   // dst = bf16(src*scale)
	decodeBF16   = half.DecodeBF16     // dst = f32(src)
	addBF16      = addBF16Generic      // dst = f32(src) + dst*scale
	addBF16Round = addBF16RoundGeneric // dst = round_bf16(f32(src) + dst*scale)
)

func encodeBF16Generic(dst []uint16, src []float32, scale float32) {
	if scale == 1 {
		half.EncodeBF16(dst, src)
		return
	}
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = half.BF16FromFloat32(f * scale)
	}
}

// The explicit float32 conversions keep the multiply and the add separate roundings (no fused
// multiply-add on any GOAMD64 level), as in the assembly.

func addBF16Generic(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = half.BF16ToFloat32(h) + float32(dst[i]*scale)
	}
}

func addBF16RoundGeneric(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = half.BF16ToFloat32(half.BF16FromFloat32(half.BF16ToFloat32(h) + float32(dst[i]*scale)))
	}
}
