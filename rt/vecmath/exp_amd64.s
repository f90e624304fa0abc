#include "textflag.h"

// func expShiftedAVX2(e *float64, x *float32, n int, shift float64, c *[expConstLen]float64, tab *[32]float64)
//
// Four lanes of Exp64(float64(x[i]) − shift), operation for operation in
// Exp64's order (no fused multiply-add), the table read by a gather; the
// special cases (NaN, x ≤ −708, x > 709) are blended in at the end.
TEXT ·expShiftedAVX2(SB), NOSPLIT, $0-48
	MOVQ e+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD shift+24(FP), Y15
	MOVQ c+32(FP), R11
	MOVQ tab+40(FP), R10
	VPBROADCASTD 88(R11), X13 // 1023
	VPBROADCASTD 96(R11), X14 // 31
	SHRQ $2, CX
	JEQ  done

loop:
	VCVTPS2PD (SI), Y0
	VSUBPD Y15, Y0, Y0          // x
	VBROADCASTSD 64(R11), Y1
	VCMPPD $0x1e, Y1, Y0, Y12   // x > -708 (false for NaN)
	VBROADCASTSD 72(R11), Y1
	VCMPPD $0x1e, Y1, Y0, Y11   // x > 709
	VCMPPD $3, Y0, Y0, Y10      // NaN
	VBROADCASTSD 0(R11), Y1
	VMULPD Y1, Y0, Y1
	VBROADCASTSD 8(R11), Y2
	VADDPD Y2, Y1, Y1
	VSUBPD Y2, Y1, Y1           // kf
	VCVTTPD2DQY Y1, X2          // k
	VBROADCASTSD 16(R11), Y3
	VMULPD Y3, Y1, Y3
	VSUBPD Y3, Y0, Y3           // r = x − kf·(ln2/32)
	VMULPD Y3, Y3, Y4           // r2
	VBROADCASTSD 24(R11), Y5
	VADDPD Y5, Y3, Y5           // 1 + r
	VBROADCASTSD 40(R11), Y6
	VMULPD Y6, Y3, Y6
	VBROADCASTSD 32(R11), Y7
	VADDPD Y7, Y6, Y6           // ½ + r/6
	VBROADCASTSD 56(R11), Y7
	VMULPD Y7, Y3, Y7
	VBROADCASTSD 48(R11), Y8
	VADDPD Y8, Y7, Y7           // 1/24 + r/120
	VMULPD Y7, Y4, Y7
	VADDPD Y7, Y6, Y6
	VMULPD Y6, Y4, Y6
	VADDPD Y6, Y5, Y5           // p
	VPSRAD $5, X2, X8
	VPADDD X13, X8, X8
	VPMOVSXDQ X8, Y8
	VPSLLQ $52, Y8, Y8          // scale = 2^(k>>5)
	VPAND X14, X2, X9           // k & 31
	VPCMPEQD Y7, Y7, Y7
	VXORPD Y1, Y1, Y1
	VGATHERDPD Y7, (R10)(X9*8), Y1
	VMULPD Y1, Y8, Y8
	VMULPD Y5, Y8, Y8           // (scale·tab)·p
	VANDPD Y12, Y8, Y8          // 0 where not x > -708
	VBROADCASTSD 80(R11), Y1
	VBLENDVPD Y11, Y1, Y8, Y8   // +Inf above 709
	VBLENDVPD Y10, Y0, Y8, Y8   // NaN stays NaN
	VMOVUPD Y8, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNE  loop

done:
	VZEROUPPER
	RET
