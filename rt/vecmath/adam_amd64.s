#include "textflag.h"

// func adamAVX(out, p, m, v *float32, n int, step, rootBC2, eps, decay float32)
//
// Eight lanes of adam.go's AdamUpdate loop, operation for operation:
// denom = √v / rootBC2 + eps; out = p·decay − step·(m / denom).
TEXT ·adamAVX(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS step+40(FP), Y12
	VBROADCASTSS rootBC2+44(FP), Y13
	VBROADCASTSS eps+48(FP), Y14
	VBROADCASTSS decay+52(FP), Y15
	SHRQ $3, CX
	JEQ  adone

aloop:
	VMOVUPS (R9), Y0
	VSQRTPS Y0, Y0
	VDIVPS  Y13, Y0, Y0
	VADDPS  Y14, Y0, Y0
	VMOVUPS (R8), Y1
	VDIVPS  Y0, Y1, Y1
	VMULPS  Y12, Y1, Y1
	VMOVUPS (SI), Y2
	VMULPS  Y15, Y2, Y2
	VSUBPS  Y1, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNE  aloop

adone:
	VZEROUPPER
	RET

// func momentAVX(out, m, gr *float32, n int, beta, w float32, square bool)
//
// Eight lanes of Moment: out = m·β + (g·g)·w with square, m·β + g·w
// without.
TEXT ·momentAVX(SB), NOSPLIT, $0-41
	MOVQ out+0(FP), DI
	MOVQ m+8(FP), SI
	MOVQ gr+16(FP), R8
	MOVQ n+24(FP), CX
	VBROADCASTSS beta+32(FP), Y14
	VBROADCASTSS w+36(FP), Y15
	MOVBLZX square+40(FP), AX
	SHRQ $3, CX
	JEQ  mdone
	TESTB AL, AL
	JEQ  mplain

msq:
	VMOVUPS (SI), Y0
	VMULPS  Y14, Y0, Y0
	VMOVUPS (R8), Y1
	VMULPS  Y1, Y1, Y1
	VMULPS  Y15, Y1, Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	DECQ CX
	JNE  msq
	JMP  mdone

mplain:
	VMOVUPS (SI), Y0
	VMULPS  Y14, Y0, Y0
	VMOVUPS (R8), Y1
	VMULPS  Y15, Y1, Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	DECQ CX
	JNE  mplain

mdone:
	VZEROUPPER
	RET
