#include "textflag.h"

// func transpose8x8(dst *float32, ldd int, src *float32, lds int)
//
// Rows r0..r7 in Y0..Y7; unpack pairs of rows (Y8..Y15), shuffle pairs of
// those into 4×4 quarter-transposes (Y0..Y7), then join the 128-bit
// halves: column k of the block is row k of the result.
TEXT ·transpose8x8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), CX
	SHLQ $2, DX
	SHLQ $2, CX
	LEAQ (CX)(CX*2), R8         // 3·lds bytes
	LEAQ (SI)(CX*4), R9         // row 4
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(CX*1), Y1
	VMOVUPS (SI)(CX*2), Y2
	VMOVUPS (SI)(R8*1), Y3
	VMOVUPS (R9), Y4
	VMOVUPS (R9)(CX*1), Y5
	VMOVUPS (R9)(CX*2), Y6
	VMOVUPS (R9)(R8*1), Y7
	VUNPCKLPS Y1, Y0, Y8        // a00 a10 a01 a11 | a04 a14 a05 a15
	VUNPCKHPS Y1, Y0, Y9        // a02 a12 a03 a13 | a06 a16 a07 a17
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0  // col 0 | col 4, rows 0-3
	VSHUFPS $0xee, Y10, Y8, Y1  // col 1 | col 5
	VSHUFPS $0x44, Y11, Y9, Y2  // col 2 | col 6
	VSHUFPS $0xee, Y11, Y9, Y3  // col 3 | col 7
	VSHUFPS $0x44, Y14, Y12, Y4 // the same for rows 4-7
	VSHUFPS $0xee, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xee, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	LEAQ (DX)(DX*2), R8
	LEAQ (DI)(DX*4), R9
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(DX*1)
	VMOVUPS Y10, (DI)(DX*2)
	VMOVUPS Y11, (DI)(R8*1)
	VMOVUPS Y12, (R9)
	VMOVUPS Y13, (R9)(DX*1)
	VMOVUPS Y14, (R9)(DX*2)
	VMOVUPS Y15, (R9)(R8*1)
	VZEROUPPER
	RET
