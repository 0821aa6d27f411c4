package cpu

import (
	"unsafe"

	xcpu "golang.org/x/sys/cpu"
)

//go:generate go run gemm_asmgen.go

// Assembly micro-kernels (gemm_amd64.s, written by gemm_asmgen.go).

// gemmKern12x32AVX512 is the whole MR×NR tile in 24 zmm accumulators.
//
//go:noescape
func gemmKern12x32AVX512(k int, a, b, c *float32, ldc int, alpha, beta float32)

// gemmKern6x16AVX2 is one 6×16 quarter of the tile (12 ymm accumulators), reading the packed
// panels with their full MR and NR strides.
//
//go:noescape
func gemmKern6x16AVX2(k int, a, b, c *float32, ldc int, alpha, beta float32)

// gemmKern12x32AVX2 does the tile as four 6×16 quarters.
func gemmKern12x32AVX2(k int, a, b, c *float32, ldc int, alpha, beta float32) {
	for q := 0; q < 4; q++ {
		r, j := (q>>1)*6, (q&1)*16
		gemmKern6x16AVX2(k,
			(*float32)(unsafe.Add(unsafe.Pointer(a), 4*r)),
			(*float32)(unsafe.Add(unsafe.Pointer(b), 4*j)),
			(*float32)(unsafe.Add(unsafe.Pointer(c), 4*(r*ldc+j))),
			ldc, alpha, beta)
	}
}

// gemmKernels lists the kernels this CPU can run, best first (tests run every one).
var gemmKernels = func() []namedKernel {
	var ks []namedKernel
	if xcpu.X86.HasAVX512F {
		ks = append(ks, namedKernel{"avx512", gemmKern12x32AVX512})
	}
	if xcpu.X86.HasAVX2 && xcpu.X86.HasFMA {
		ks = append(ks, namedKernel{"avx2", gemmKern12x32AVX2})
	}
	return append(ks, namedKernel{"go", gemmKernGo})
}()

//go:noescape
func transpose8AVX(d, s *float32, cs, ldd, blocks int)

func transpose8Asm(d, s []float32, cs, ldd, kc int) {
	blocks := kc / 8
	if blocks > 0 {
		_ = d[(blocks*8-1)*ldd+7] // bounds of what the assembly touches
		_ = s[7*cs+blocks*8-1]
		transpose8AVX(&d[0], &s[0], cs, ldd, blocks)
	}
	if rest := kc - blocks*8; rest > 0 {
		transpose8Go(d[blocks*8*ldd:], s[blocks*8:], cs, ldd, rest)
	}
}

func init() {
	gemmKern = gemmKernels[0].fn
	if xcpu.X86.HasAVX2 {
		transpose8 = transpose8Asm
	}
}
