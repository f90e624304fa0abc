#include "textflag.h"

// func binaryAVX(out, x, y *float32, n, xinc, yinc int, op byte)
//
// out[i] = x[i] op y[i] on eight lanes, n/8 steps; x and y advance xinc
// and yinc bytes a step (32, or 0 for a scalar operand). One loop per
// op, chosen before the loop.
TEXT ·binaryAVX(SB), NOSPLIT, $0-49
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ xinc+32(FP), R9
	MOVQ yinc+40(FP), R10
	MOVBLZX op+48(FP), AX
	SHRQ $3, CX
	JEQ  bdone
	CMPB AL, $'+'
	JEQ  badd
	CMPB AL, $'-'
	JEQ  bsub
	CMPB AL, $'*'
	JEQ  bmul

bdiv:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VDIVPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ R9, SI
	ADDQ R10, R8
	DECQ CX
	JNE  bdiv
	JMP  bdone

badd:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ R9, SI
	ADDQ R10, R8
	DECQ CX
	JNE  badd
	JMP  bdone

bsub:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VSUBPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ R9, SI
	ADDQ R10, R8
	DECQ CX
	JNE  bsub
	JMP  bdone

bmul:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VMULPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ R9, SI
	ADDQ R10, R8
	DECQ CX
	JNE  bmul

bdone:
	VZEROUPPER
	RET
