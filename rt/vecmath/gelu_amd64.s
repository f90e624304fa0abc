#include "textflag.h"

// gelu and gelu' on eight f32 lanes (AVX2, FMA): gelu.go's algorithm,
// step for step, so the scalar twin there documents this code. CX points
// at geluTable: one 32-byte row per constant, named below by offset.
#define C_NEGMAX 0(CX)
#define C_MAX 32(CX)
#define C_ABS 64(CX)
#define C_ONE 96(CX)
#define C_K 128(CX)
#define C_P10 160(CX)
#define C_P9 192(CX)
#define C_P8 224(CX)
#define C_P7 256(CX)
#define C_P6 288(CX)
#define C_P5 320(CX)
#define C_P4 352(CX)
#define C_P3 384(CX)
#define C_P2 416(CX)
#define C_P1 448(CX)
#define C_P0 480(CX)
#define C_HALF 512(CX)
#define C_LOG2E 544(CX)
#define C_LN2HI 576(CX)
#define C_LN2LO 608(CX)
#define C_E7 640(CX)
#define C_E6 672(CX)
#define C_E5 704(CX)
#define C_E4 736(CX)
#define C_E3 768(CX)
#define C_INVSQRT2PI 800(CX)
#define C_BIAS 832(CX)

// TERMS loads x = src[0:8] into Y0 and leaves, as geluTerms does,
// Y1 = xc (x clamped to ±16; a NaN becomes −16 here, the caller's x·0
// makes it NaN again), Y4 = h = ½R = τ·P(τ), Y9 = e^r, Y11 = 2^n1 and
// Y10 = 2^n2 with e^(−xc²/2) = e^r·2^n1·2^n2.
#define TERMS \
	VMOVUPS (SI), Y0; \
	VMAXPS C_NEGMAX, Y0, Y1; \
	VMINPS C_MAX, Y1, Y1; \
	VANDPS C_ABS, Y1, Y2; \
	VMOVUPS C_ONE, Y3; \
	VFMADD231PS C_K, Y2, Y3; \
	VMOVUPS C_ONE, Y4; \
	VDIVPS Y3, Y4, Y3; \
	VMOVUPS C_P10, Y4; \
	VFMADD213PS C_P9, Y3, Y4; \
	VFMADD213PS C_P8, Y3, Y4; \
	VFMADD213PS C_P7, Y3, Y4; \
	VFMADD213PS C_P6, Y3, Y4; \
	VFMADD213PS C_P5, Y3, Y4; \
	VFMADD213PS C_P4, Y3, Y4; \
	VFMADD213PS C_P3, Y3, Y4; \
	VFMADD213PS C_P2, Y3, Y4; \
	VFMADD213PS C_P1, Y3, Y4; \
	VFMADD213PS C_P0, Y3, Y4; \
	VMULPS Y3, Y4, Y4; \
	VMULPS Y2, Y2, Y5; \
	VMOVAPS Y5, Y6; \
	VFMSUB231PS Y2, Y2, Y6; \
	VMULPS C_HALF, Y5, Y5; \
	VMULPS C_HALF, Y6, Y6; \
	VMULPS C_LOG2E, Y5, Y7; \
	VROUNDPS $0, Y7, Y7; \
	VMOVAPS Y5, Y8; \
	VFMSUB231PS C_LN2HI, Y7, Y8; \
	VFMADD231PS C_LN2LO, Y7, Y8; \
	VSUBPS Y6, Y8, Y8; \
	VMOVUPS C_E7, Y9; \
	VFMADD213PS C_E6, Y8, Y9; \
	VFMADD213PS C_E5, Y8, Y9; \
	VFMADD213PS C_E4, Y8, Y9; \
	VFMADD213PS C_E3, Y8, Y9; \
	VFMADD213PS C_HALF, Y8, Y9; \
	VFMADD213PS C_ONE, Y8, Y9; \
	VFMADD213PS C_ONE, Y8, Y9; \
	VCVTPS2DQ Y7, Y7; \
	VPXOR Y10, Y10, Y10; \
	VPSUBD Y7, Y10, Y10; \
	VPSRAD $1, Y10, Y11; \
	VPSUBD Y11, Y10, Y10; \
	VPADDD C_BIAS, Y11, Y11; \
	VPSLLD $23, Y11, Y11; \
	VPADDD C_BIAS, Y10, Y10; \
	VPSLLD $23, Y10, Y10

// func geluVecAVX2(dst, src *float32, n int, c *[geluTableLen][8]float32)
//
// x ≥ 0: fma(−xc, Q, x) with Q = ((h·e^r)·2^n1)·2^n2;
// x < 0: (((xc·h)·e^r)·2^n1)·2^n2 + x·0.
TEXT ·geluVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), DX
	MOVQ c+24(FP), CX
	SHRQ $3, DX
	JEQ  gdone

gloop:
	TERMS
	VMULPS Y9, Y4, Y12
	VMULPS Y11, Y12, Y12
	VMULPS Y10, Y12, Y12
	VMOVAPS Y0, Y13
	VFNMADD231PS Y12, Y1, Y13
	VMULPS Y4, Y1, Y14
	VMULPS Y9, Y14, Y14
	VMULPS Y11, Y14, Y14
	VMULPS Y10, Y14, Y14
	VXORPS Y15, Y15, Y15
	VMULPS Y15, Y0, Y2
	VADDPS Y2, Y14, Y14
	VCMPPS $13, Y15, Y1, Y3
	VBLENDVPS Y3, Y13, Y14, Y14
	VMOVUPS Y14, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ DX
	JNE  gloop

gdone:
	VZEROUPPER
	RET

// func geluGradVecAVX2(dst, src *float32, n int, c *[geluTableLen][8]float32)
//
// x ≥ 0: fma((e^r·2^n1)·2^n2, fma(xc, 1/√(2π), −h), 1);
// x < 0: ((fma(xc, 1/√(2π), h)·e^r)·2^n1)·2^n2; then + x·0 for both.
TEXT ·geluGradVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), DX
	MOVQ c+24(FP), CX
	SHRQ $3, DX
	JEQ  ddone

dloop:
	TERMS
	VMULPS Y11, Y9, Y12
	VMULPS Y10, Y12, Y12
	VMOVAPS Y4, Y13
	VFMSUB231PS C_INVSQRT2PI, Y1, Y13
	VFMADD213PS C_ONE, Y12, Y13
	VMOVAPS Y4, Y14
	VFMADD231PS C_INVSQRT2PI, Y1, Y14
	VMULPS Y9, Y14, Y14
	VMULPS Y11, Y14, Y14
	VMULPS Y10, Y14, Y14
	VXORPS Y15, Y15, Y15
	VCMPPS $13, Y15, Y1, Y3
	VBLENDVPS Y3, Y13, Y14, Y14
	VMULPS Y15, Y0, Y2
	VADDPS Y2, Y14, Y14
	VMOVUPS Y14, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ DX
	JNE  dloop

ddone:
	VZEROUPPER
	RET
