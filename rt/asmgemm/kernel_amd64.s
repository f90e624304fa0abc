//go:build amd64

#include "textflag.h"

// LOAD_STEPS loads the arguments every kernel takes (k int, a *float32,
// lda int, b *float32, ldb int, c *float32, ldc int): k into CX, a, b, c
// into SI, DI, DX, and the strides in bytes into R9, R11, R8.
#define LOAD_STEPS \
	MOVQ k+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ lda+16(FP), R9; \
	SHLQ $2, R9; \
	MOVQ b+24(FP), DI; \
	MOVQ ldb+32(FP), R11; \
	SHLQ $2, R11; \
	MOVQ c+40(FP), DX; \
	MOVQ ldc+48(FP), R8; \
	SHLQ $2, R8

// The 6×16 AVX2 tile, shared by sgemm6x16r and sgemm6x16c: twelve YMM
// accumulators Y4..Y15 (row i in Y(4+2i), Y(5+2i)), a B row of 16 in Y0,
// Y1, A values broadcast into Y2, Y3 in turn.

// ZERO_TILE_Y clears the accumulators.
#define ZERO_TILE_Y \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11; \
	VXORPS Y12, Y12, Y12; \
	VXORPS Y13, Y13, Y13; \
	VXORPS Y14, Y14, Y14; \
	VXORPS Y15, Y15, Y15

// BCAST_FMA_Y broadcasts the A value at mem into yt and adds it times the
// B row (Y0, Y1) to one tile row (ya, yb).
#define BCAST_FMA_Y(mem, yt, ya, yb) \
	VBROADCASTSS mem, yt; \
	VFMADD231PS Y0, yt, ya; \
	VFMADD231PS Y1, yt, yb

// ADD_ROW_Y adds one tile row to the C row at DX and stores it;
// STORE_ROW_Y stores it; both then step DX to the next C row (R8 bytes).
#define ADD_ROW_Y(ya, yb) \
	VADDPS (DX), ya, ya; \
	VADDPS 32(DX), yb, yb; \
	VMOVUPS ya, (DX); \
	VMOVUPS yb, 32(DX); \
	ADDQ R8, DX

#define STORE_ROW_Y(ya, yb) \
	VMOVUPS ya, (DX); \
	VMOVUPS yb, 32(DX); \
	ADDQ R8, DX

// FINISH_TILE_Y writes the tile to C at DX (row stride R8 bytes): added
// to C when AX is non-zero, over it otherwise.
#define FINISH_TILE_Y \
	TESTQ AX, AX; \
	JE    store; \
	ADD_ROW_Y(Y4, Y5); \
	ADD_ROW_Y(Y6, Y7); \
	ADD_ROW_Y(Y8, Y9); \
	ADD_ROW_Y(Y10, Y11); \
	ADD_ROW_Y(Y12, Y13); \
	ADD_ROW_Y(Y14, Y15); \
	VZEROUPPER; \
	RET; \
store: \
	STORE_ROW_Y(Y4, Y5); \
	STORE_ROW_Y(Y6, Y7); \
	STORE_ROW_Y(Y8, Y9); \
	STORE_ROW_Y(Y10, Y11); \
	STORE_ROW_Y(Y12, Y13); \
	STORE_ROW_Y(Y14, Y15); \
	VZEROUPPER; \
	RET

// func sgemm6x16r(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// C[0:6, 0:16] (row stride ldc elements) = (acc ? C : 0) + A·B over k
// steps, reading A where it lies, without a packed panel: A[i, p] is
// a[i·lda + p], rows 0-2 from SI and 3-5 from AX (each base and base +
// lda, + 2·lda), both bases one element on per step of p (the AVX2 twin
// of sgemm12x32r); B's rows are ldb elements apart (16 for a packed
// panel). Each step loads one B row (Y0, Y1) and broadcasts the six A
// values (Y2, Y3 alternating) into twelve fused multiply-adds, so each C
// element is the same sequence of them as sgemm6x16c's. Needs AVX2 and
// FMA (checked by the caller).
TEXT ·sgemm6x16r(SB), NOSPLIT, $0-57
	LOAD_STEPS
	LEAQ (SI)(R9*2), AX
	ADDQ R9, AX
	ZERO_TILE_Y
	TESTQ CX, CX
	JE   done

loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	BCAST_FMA_Y((SI), Y2, Y4, Y5)
	BCAST_FMA_Y((SI)(R9*1), Y3, Y6, Y7)
	BCAST_FMA_Y((SI)(R9*2), Y2, Y8, Y9)
	BCAST_FMA_Y((AX), Y3, Y10, Y11)
	BCAST_FMA_Y((AX)(R9*1), Y2, Y12, Y13)
	BCAST_FMA_Y((AX)(R9*2), Y3, Y14, Y15)
	ADDQ $4, SI
	ADDQ $4, AX
	ADDQ R11, DI
	DECQ CX
	JNE  loop

done:
	MOVBLZX acc+56(FP), AX
	FINISH_TILE_Y

// func sgemm6x16c(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// sgemm6x16r reading A[i, p] at a[p·lda + i]: a packed panel (lda = 6,
// the packed path) or a transposed A in place; B's rows are ldb elements
// apart. Each C element is the same sequence of fused multiply-adds as
// sgemm6x16r's.
TEXT ·sgemm6x16c(SB), NOSPLIT, $0-57
	LOAD_STEPS
	ZERO_TILE_Y
	TESTQ CX, CX
	JE   done

loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	BCAST_FMA_Y(0(SI), Y2, Y4, Y5)
	BCAST_FMA_Y(4(SI), Y3, Y6, Y7)
	BCAST_FMA_Y(8(SI), Y2, Y8, Y9)
	BCAST_FMA_Y(12(SI), Y3, Y10, Y11)
	BCAST_FMA_Y(16(SI), Y2, Y12, Y13)
	BCAST_FMA_Y(20(SI), Y3, Y14, Y15)
	ADDQ R9, SI
	ADDQ R11, DI
	DECQ CX
	JNE  loop

done:
	MOVBLZX acc+56(FP), AX
	FINISH_TILE_Y

// The 12×32 AVX-512 tile, shared by sgemm12x32r and sgemm12x32c: 24 ZMM
// accumulators Z8..Z31 (row i in Z(8+2i), Z(9+2i)), a B row of 32 in Z0,
// Z1, A values broadcast into Z2..Z7 in turn.

// ZERO_TILE clears the accumulators.
#define ZERO_TILE \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31

// BCAST_FMA broadcasts the A value at mem into zt and adds it times the B
// row (Z0, Z1) to one tile row (za, zb).
#define BCAST_FMA(mem, zt, za, zb) \
	VBROADCASTSS mem, zt; \
	VFMADD231PS Z0, zt, za; \
	VFMADD231PS Z1, zt, zb

// ADD_ROW adds one tile row to the C row at DX and stores it; STORE_ROW
// stores it; both then step DX to the next C row (R8 bytes on).
#define ADD_ROW(za, zb) \
	VADDPS (DX), za, za; \
	VADDPS 64(DX), zb, zb; \
	VMOVUPS za, (DX); \
	VMOVUPS zb, 64(DX); \
	ADDQ R8, DX

#define STORE_ROW(za, zb) \
	VMOVUPS za, (DX); \
	VMOVUPS zb, 64(DX); \
	ADDQ R8, DX

// FINISH_TILE writes the tile to C at DX (row stride R8 bytes): added to
// C when AX is non-zero, over it otherwise.
#define FINISH_TILE \
	TESTQ AX, AX; \
	JE    store; \
	ADD_ROW(Z8, Z9); \
	ADD_ROW(Z10, Z11); \
	ADD_ROW(Z12, Z13); \
	ADD_ROW(Z14, Z15); \
	ADD_ROW(Z16, Z17); \
	ADD_ROW(Z18, Z19); \
	ADD_ROW(Z20, Z21); \
	ADD_ROW(Z22, Z23); \
	ADD_ROW(Z24, Z25); \
	ADD_ROW(Z26, Z27); \
	ADD_ROW(Z28, Z29); \
	ADD_ROW(Z30, Z31); \
	VZEROUPPER; \
	RET; \
store: \
	STORE_ROW(Z8, Z9); \
	STORE_ROW(Z10, Z11); \
	STORE_ROW(Z12, Z13); \
	STORE_ROW(Z14, Z15); \
	STORE_ROW(Z16, Z17); \
	STORE_ROW(Z18, Z19); \
	STORE_ROW(Z20, Z21); \
	STORE_ROW(Z22, Z23); \
	STORE_ROW(Z24, Z25); \
	STORE_ROW(Z26, Z27); \
	STORE_ROW(Z28, Z29); \
	STORE_ROW(Z30, Z31); \
	VZEROUPPER; \
	RET

// func sgemm12x32r(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// The AVX-512 twin of sgemm6x16r: a 12×32 tile in 24 ZMM accumulators
// (Z8..Z31: row i in Z(8+2i), Z(9+2i)), one B row of 32 in Z0, Z1, the A
// values broadcast into Z2..Z7 in turn, reading A where it lies: A[i, p] is
// a[i·lda + p], rows 0-2 from SI, 3-5 from AX, 6-8 from BX, 9-11 from
// R10 (each base and base + lda, + 2·lda), every base one element on per
// step of p: packing A cost as much as the multiply where few B panels
// share an A panel (asmgemm.inPlace). B's rows are ldb elements apart (32
// for a packed panel). Each C element is the same sequence of fused
// multiply-adds as sgemm12x32c's. Needs AVX-512F (checked by the caller).
TEXT ·sgemm12x32r(SB), NOSPLIT, $0-57
	LOAD_STEPS
	LEAQ (SI)(R9*2), AX
	ADDQ R9, AX
	LEAQ (AX)(R9*2), BX
	ADDQ R9, BX
	LEAQ (BX)(R9*2), R10
	ADDQ R9, R10
	ZERO_TILE
	TESTQ CX, CX
	JE   done

loop:
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	BCAST_FMA((SI), Z2, Z8, Z9)
	BCAST_FMA((SI)(R9*1), Z3, Z10, Z11)
	BCAST_FMA((SI)(R9*2), Z4, Z12, Z13)
	BCAST_FMA((AX), Z5, Z14, Z15)
	BCAST_FMA((AX)(R9*1), Z6, Z16, Z17)
	BCAST_FMA((AX)(R9*2), Z7, Z18, Z19)
	BCAST_FMA((BX), Z2, Z20, Z21)
	BCAST_FMA((BX)(R9*1), Z3, Z22, Z23)
	BCAST_FMA((BX)(R9*2), Z4, Z24, Z25)
	BCAST_FMA((R10), Z5, Z26, Z27)
	BCAST_FMA((R10)(R9*1), Z6, Z28, Z29)
	BCAST_FMA((R10)(R9*2), Z7, Z30, Z31)
	ADDQ $4, SI
	ADDQ $4, AX
	ADDQ $4, BX
	ADDQ $4, R10
	ADDQ R11, DI
	DECQ CX
	JNE  loop

done:
	MOVBLZX acc+56(FP), AX
	FINISH_TILE

// func sgemm12x32c(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// sgemm12x32r reading A[i, p] at a[p·lda + i]: a packed panel (lda = 12,
// the packed path) or a transposed A in place; B's rows are ldb elements
// apart. Each C element is the same sequence of fused multiply-adds as
// sgemm12x32r's.
TEXT ·sgemm12x32c(SB), NOSPLIT, $0-57
	LOAD_STEPS
	ZERO_TILE
	TESTQ CX, CX
	JE   done

loop:
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	BCAST_FMA(0(SI), Z2, Z8, Z9)
	BCAST_FMA(4(SI), Z3, Z10, Z11)
	BCAST_FMA(8(SI), Z4, Z12, Z13)
	BCAST_FMA(12(SI), Z5, Z14, Z15)
	BCAST_FMA(16(SI), Z6, Z16, Z17)
	BCAST_FMA(20(SI), Z7, Z18, Z19)
	BCAST_FMA(24(SI), Z2, Z20, Z21)
	BCAST_FMA(28(SI), Z3, Z22, Z23)
	BCAST_FMA(32(SI), Z4, Z24, Z25)
	BCAST_FMA(36(SI), Z5, Z26, Z27)
	BCAST_FMA(40(SI), Z6, Z28, Z29)
	BCAST_FMA(44(SI), Z7, Z30, Z31)
	ADDQ R9, SI
	ADDQ R11, DI
	DECQ CX
	JNE  loop

done:
	MOVBLZX acc+56(FP), AX
	FINISH_TILE
