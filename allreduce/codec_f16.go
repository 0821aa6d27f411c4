package allreduce

import "github.com/goddp/goddp/model/half"

// The f16 wire codec: IEEE 754 binary16, round to nearest even, subnormals kept, infinities and
// NaNs carried (a NaN stays a NaN: its top mantissa bits are kept and the quiet bit is set, as
// github.com/x448/float16 does). One value is converted by model/half, the repo's one f16 codec
// (a leaf package: allreduce still imports nothing of model's tensors); the slice loops below are
// built on it, and kernels_amd64.go swaps in F16C/AVX2 versions of them when the CPU has them,
// bit-identical to these (codec_f16_test.go checks that on every kernel).

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
			dst[i] = half.FromFloat32(f)
		}
		return
	}
	for i, f := range src {
		dst[i] = half.FromFloat32(f * scale)
	}
}

func decodeF16Generic(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	t := half.Table()
	for i, h := range src {
		dst[i] = t[h]
	}
}

func addF16Generic(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := half.Table()
	for i, h := range src {
		dst[i] = t[h] + dst[i]*scale
	}
}

func addF16RoundGeneric(dst []float32, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := half.Table()
	for i, h := range src {
		dst[i] = t[half.FromFloat32(t[h]+dst[i]*scale)]
	}
}

func addF16F16Generic(dst []uint16, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := half.Table()
	for i, h := range src {
		dst[i] = half.FromFloat32(t[h] + t[dst[i]]*scale)
	}
}

// scaleF16 does dst[i] = f16(f32(src[i])*scale) (the first send of a pre-divided half buffer).
func scaleF16(dst, src []uint16, scale float32) {
	dst = dst[:len(src)]
	t := half.Table()
	for i, h := range src {
		dst[i] = half.FromFloat32(t[h] * scale)
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
