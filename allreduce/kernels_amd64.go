package allreduce

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

// hasF16C says whether the assembly kernels are in use.
var hasF16C = cpuidF16C()

func init() {
	if !hasF16C {
		return
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
