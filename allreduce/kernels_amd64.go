package allreduce

import "github.com/goddp/goddp/model/half"

// On amd64 with F16C (every x86 since about 2012), the slice kernels run 8 lanes at a time;
// the Go bodies finish the tails (fewer than 8 elements), so both paths stay in use and tested.

//go:noescape
func cpuidF16C() bool

//go:noescape
func encodeF16AVX(dst *uint16, src *float32, n int, scale float32)

//go:noescape
func decodeF16AVX(dst *float32, src *uint16, n int)

//go:noescape
func addF16AVX(dst *float32, src *uint16, n int, scale float32, round bool)

//go:noescape
func addF16F16AVX(dst *uint16, src *uint16, n int, scale float32)

//go:noescape
func addF32AVX(dst, src *float32, n int)

//go:noescape
func cpuidAVX2() bool

//go:noescape
func encodeBF16AVX(dst *uint16, src *float32, n int, scale float32)

//go:noescape
func decodeBF16AVX(dst *float32, src *uint16, n int)

//go:noescape
func addBF16AVX(dst *float32, src *uint16, n int, scale float32, round bool)

// hasF16C says whether the assembly kernels are in use; hasAVX2 whether the bf16 ones are too
// (AVX2's 256-bit integer operations; F16C's check covers the OS saving the YMM state).
var (
	hasF16C = cpuidF16C()
	hasAVX2 = hasF16C && cpuidAVX2()
)

func init() {
	if !hasF16C {
		return
	}
	if hasAVX2 {
		encodeBF16 = func(dst []uint16, src []float32, scale float32) {
			dst = dst[:len(src)]
			v := len(src) &^ 7
			if v > 0 {
				encodeBF16AVX(&dst[0], &src[0], v, scale)
			}
			encodeBF16Generic(dst[v:], src[v:], scale)
		}
		decodeBF16 = func(dst []float32, src []uint16) {
			dst = dst[:len(src)]
			v := len(src) &^ 7
			if v > 0 {
				decodeBF16AVX(&dst[0], &src[0], v)
			}
			half.DecodeBF16(dst[v:], src[v:])
		}
		addBF16 = func(dst []float32, src []uint16, scale float32) {
			dst = dst[:len(src)]
			v := len(src) &^ 7
			if v > 0 {
				addBF16AVX(&dst[0], &src[0], v, scale, false)
			}
			addBF16Generic(dst[v:], src[v:], scale)
		}
		addBF16Round = func(dst []float32, src []uint16, scale float32) {
			dst = dst[:len(src)]
			v := len(src) &^ 7
			if v > 0 {
				addBF16AVX(&dst[0], &src[0], v, scale, true)
			}
			addBF16RoundGeneric(dst[v:], src[v:], scale)
		}
	}
	encodeF16 = func(dst []uint16, src []float32, scale float32) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			encodeF16AVX(&dst[0], &src[0], v, scale)
		}
		encodeF16Generic(dst[v:], src[v:], scale)
	}
	decodeF16 = func(dst []float32, src []uint16) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			decodeF16AVX(&dst[0], &src[0], v)
		}
		decodeF16Generic(dst[v:], src[v:])
	}
	addF16 = func(dst []float32, src []uint16, scale float32) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			addF16AVX(&dst[0], &src[0], v, scale, false)
		}
		addF16Generic(dst[v:], src[v:], scale)
	}
	addF16Round = func(dst []float32, src []uint16, scale float32) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			addF16AVX(&dst[0], &src[0], v, scale, true)
		}
		addF16RoundGeneric(dst[v:], src[v:], scale)
	}
	addF16F16 = func(dst []uint16, src []uint16, scale float32) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			addF16F16AVX(&dst[0], &src[0], v, scale)
		}
		addF16F16Generic(dst[v:], src[v:], scale)
	}
	addF32 = func(dst, src []float32) {
		dst = dst[:len(src)]
		v := len(src) &^ 7
		if v > 0 {
			addF32AVX(&dst[0], &src[0], v)
		}
		addF32Generic(dst[v:], src[v:])
	}
}
