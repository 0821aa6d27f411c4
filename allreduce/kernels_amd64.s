#include "textflag.h"

// F16C/AVX versions of the slice kernels in codec_f16.go, 8 elements per step (the Go
// wrappers in kernels_amd64.go do the tails). VCVTPS2PH with immediate 0 rounds to nearest
// even; F16C quiets NaNs and keeps their top payload bits exactly as codec_f16.go does, and
// multiplies and adds are separate instructions (no FMA), as in the Go code, so results are
// bit-identical to the portable kernels (checked in codec_f16_test.go).

// func cpuidF16C() bool
TEXT ·cpuidF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	// OSXSAVE (27), AVX (28), F16C (29)
	MOVL CX, BX
	ANDL $0x38000000, BX
	CMPL BX, $0x38000000
	JNE  no
	// The OS saves XMM and YMM state: XCR0 bits 1 and 2.
	XORL CX, CX
	XGETBV
	ANDL $6, AX
	CMPL AX, $6
	JNE  no
	MOVB $1, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET

// func encodeF16AVX(dst *uint16, src *float32, n int, scale float32)
TEXT ·encodeF16AVX(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y7
enc16:
	CMPQ CX, $16
	JL   enc8
	VMULPS (SI), Y7, Y0
	VMULPS 32(SI), Y7, Y1
	VCVTPS2PH $0, Y0, (DI)
	VCVTPS2PH $0, Y1, 16(DI)
	ADDQ $64, SI
	ADDQ $32, DI
	SUBQ $16, CX
	JMP  enc16
enc8:
	CMPQ CX, $8
	JL   encdone
	VMULPS (SI), Y7, Y0
	VCVTPS2PH $0, Y0, (DI)
encdone:
	VZEROUPPER
	RET

// func decodeF16AVX(dst *float32, src *uint16, n int)
TEXT ·decodeF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
dec16:
	CMPQ CX, $16
	JL   dec8
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  dec16
dec8:
	CMPQ CX, $8
	JL   decdone
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
decdone:
	VZEROUPPER
	RET

// func addF16AVX(dst *float32, src *uint16, n int, scale float32, round bool)
// dst = f32(src) + dst*scale, then (round) to the nearest half value.
TEXT ·addF16AVX(SB), NOSPLIT, $0-29
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y7
	MOVBLZX round+28(FP), DX
add8:
	CMPQ CX, $8
	JL   adddone
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y7, Y1
	VADDPS Y1, Y0, Y0
	TESTQ DX, DX
	JZ   addstore
	VCVTPS2PH $0, Y0, X0
	VCVTPH2PS X0, Y0
addstore:
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  add8
adddone:
	VZEROUPPER
	RET

// func addF16F16AVX(dst *uint16, src *uint16, n int, scale float32)
// dst = f16(f32(src) + f32(dst)*scale)
TEXT ·addF16F16AVX(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y7
hh8:
	CMPQ CX, $8
	JL   hhdone
	VCVTPH2PS (SI), Y0
	VCVTPH2PS (DI), Y1
	VMULPS Y7, Y1, Y1
	VADDPS Y1, Y0, Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  hh8
hhdone:
	VZEROUPPER
	RET

// func addF32AVX(dst, src *float32, n int)
TEXT ·addF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
f16loop:
	CMPQ CX, $16
	JL   f8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  f16loop
f8:
	CMPQ CX, $8
	JL   fdone
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
fdone:
	VZEROUPPER
	RET

// ---- bf16 (AVX2) ----
//
// AVX2 versions of codec_bf16.go's kernels, 8 elements per step, bit-identical to the Go ones
// (codec_bf16_test.go): narrowing adds 0x7fff plus the lowest kept bit and keeps the top 16
// bits; a NaN keeps its sign and top payload with the quiet bit set (VCMPPS unordered selects
// it); widening is a zero-extend and a shift. Multiplies and adds are separate instructions.

// func cpuidAVX2() bool
TEXT ·cpuidAVX2(SB), NOSPLIT, $0-1
	XORL AX, AX
	XORL CX, CX
	CPUID
	CMPL AX, $7
	JL   noavx2
	MOVL $7, AX
	XORL CX, CX
	CPUID
	SHRL $5, BX
	ANDL $1, BX
	MOVB BX, ret+0(FP)
	RET
noavx2:
	MOVB $0, ret+0(FP)
	RET

// func encodeBF16AVX(dst *uint16, src *float32, n int, scale float32)
TEXT ·encodeBF16AVX(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y7
	MOVL $0x7fff, AX
	MOVQ AX, X6
	VPBROADCASTD X6, Y6
	MOVL $1, AX
	MOVQ AX, X5
	VPBROADCASTD X5, Y5
	MOVL $0x00400000, AX
	MOVQ AX, X4
	VPBROADCASTD X4, Y4
bfenc8:
	CMPQ CX, $8
	JL   bfencdone
	VMULPS (SI), Y7, Y0
	VPSRLD $16, Y0, Y1
	VPAND Y5, Y1, Y1
	VPADDD Y6, Y1, Y1
	VPADDD Y0, Y1, Y1
	VCMPPS $3, Y0, Y0, Y2
	VPOR Y4, Y0, Y3
	VBLENDVPS Y2, Y3, Y1, Y1
	VPSRLD $16, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPACKUSDW X2, X1, X1
	VMOVDQU X1, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  bfenc8
bfencdone:
	VZEROUPPER
	RET

// func decodeBF16AVX(dst *float32, src *uint16, n int)
TEXT ·decodeBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
bfdec8:
	CMPQ CX, $8
	JL   bfdecdone
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  bfdec8
bfdecdone:
	VZEROUPPER
	RET

// func addBF16AVX(dst *float32, src *uint16, n int, scale float32, round bool)
// dst = f32(src) + dst*scale, then (round) to the nearest bfloat16 value.
TEXT ·addBF16AVX(SB), NOSPLIT, $0-29
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y7
	MOVBLZX round+28(FP), DX
	MOVL $0x7fff, AX
	MOVQ AX, X6
	VPBROADCASTD X6, Y6
	MOVL $1, AX
	MOVQ AX, X5
	VPBROADCASTD X5, Y5
	MOVL $0x00400000, AX
	MOVQ AX, X4
	VPBROADCASTD X4, Y4
	MOVL $0xffff0000, AX
	MOVQ AX, X8
	VPBROADCASTD X8, Y8
bfadd8:
	CMPQ CX, $8
	JL   bfadddone
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMULPS (DI), Y7, Y1
	VADDPS Y1, Y0, Y0
	TESTQ DX, DX
	JZ   bfaddstore
	VPSRLD $16, Y0, Y1
	VPAND Y5, Y1, Y1
	VPADDD Y6, Y1, Y1
	VPADDD Y0, Y1, Y1
	VCMPPS $3, Y0, Y0, Y2
	VPOR Y4, Y0, Y3
	VBLENDVPS Y2, Y3, Y1, Y1
	VPAND Y8, Y1, Y0
bfaddstore:
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  bfadd8
bfadddone:
	VZEROUPPER
	RET
