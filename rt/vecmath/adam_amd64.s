#include "textflag.h"

// The three kernels share their arithmetic, so that AdamFused's lanes are
// the separate kernels' operation for operation (bit for bit).

// MOMENT sets ym = ym·yb + yg·yw, yt a scratch register: a moment of
// gradient (or squared gradient) yg with β yb and 1 − β yw.
#define MOMENT(ym, yg, yb, yw, yt) \
	VMULPS yb, ym, ym; \
	VMULPS yw, yg, yt; \
	VADDPS yt, ym, ym

// UPDATE writes p·decay − step·(m / (√v / rootBC2 + eps)) to (DI), for v
// in yv and m in ym (both overwritten), p at (SI), and step, rootBC2,
// eps, decay in Y12-Y15; Y2 is its scratch.
#define UPDATE(yv, ym) \
	VSQRTPS yv, yv; \
	VDIVPS  Y13, yv, yv; \
	VADDPS  Y14, yv, yv; \
	VDIVPS  yv, ym, ym; \
	VMULPS  Y12, ym, ym; \
	VMOVUPS (SI), Y2; \
	VMULPS  Y15, Y2, Y2; \
	VSUBPS  ym, Y2, Y2; \
	VMOVUPS Y2, (DI)

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
	VMOVUPS (R8), Y1
	UPDATE(Y0, Y1)
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
	VMOVUPS (R8), Y1
	VMULPS  Y1, Y1, Y1
	MOMENT(Y0, Y1, Y14, Y15, Y1)
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	DECQ CX
	JNE  msq
	JMP  mdone

mplain:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	MOMENT(Y0, Y1, Y14, Y15, Y1)
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	DECQ CX
	JNE  mplain

mdone:
	VZEROUPPER
	RET

// func adamFusedAVX(pOut, mOut, vOut, p, m, v, gr *float32, n int, b1, w1, b2, w2, step, rootBC2, eps, decay float32)
//
// Eight lanes of AdamFused: momentAVX's two moments and adamAVX's update
// on them, operation for operation, each slice read or written once.
TEXT ·adamFusedAVX(SB), NOSPLIT, $0-96
	MOVQ pOut+0(FP), DI
	MOVQ mOut+8(FP), R10
	MOVQ vOut+16(FP), R11
	MOVQ p+24(FP), SI
	MOVQ m+32(FP), R8
	MOVQ v+40(FP), R9
	MOVQ gr+48(FP), R12
	MOVQ n+56(FP), CX
	VBROADCASTSS b1+64(FP), Y8
	VBROADCASTSS w1+68(FP), Y9
	VBROADCASTSS b2+72(FP), Y10
	VBROADCASTSS w2+76(FP), Y11
	VBROADCASTSS step+80(FP), Y12
	VBROADCASTSS rootBC2+84(FP), Y13
	VBROADCASTSS eps+88(FP), Y14
	VBROADCASTSS decay+92(FP), Y15
	SHRQ $3, CX
	JEQ  fdone

floop:
	VMOVUPS (R12), Y0
	VMOVUPS (R8), Y1
	MOMENT(Y1, Y0, Y8, Y9, Y2)
	VMOVUPS Y1, (R10)
	VMOVUPS (R9), Y3
	VMULPS  Y0, Y0, Y4
	MOMENT(Y3, Y4, Y10, Y11, Y4)
	VMOVUPS Y3, (R11)
	UPDATE(Y3, Y1)
	ADDQ $32, DI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R12
	DECQ CX
	JNE  floop

fdone:
	VZEROUPPER
	RET
