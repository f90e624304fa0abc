// Package asmgemm is meshrun's own SGEMM in Go assembly (issue 10: can a
// GEMM of our own reach 0.7× of OpenBLAS?), the default BLAS where
// OpenBLAS is absent (rt.AsmBLAS). It is row-major, for amd64, with two
// micro-kernels (kernel_amd64.s): 6×16 on AVX2/FMA and 12×32 on AVX-512F,
// over panels in the layout of the GotoBLAS/BLIS papers: B packed kc×nr
// panel by panel, A in mr-row panels of kc columns, so the kernel streams
// both from cache; C is written once per kc block (overwritten on the
// first, added to after). Two kernels of each shape: one reads A[i, p]
// at a[p·lda + i], a packed panel (lda = mr) or a transposed A in place
// (sgemm6x16c, sgemm12x32c); the other an untransposed A's rows in place
// (sgemm6x16r, sgemm12x32r). A is not packed where it can be read so, since packing
// cost as much as the multiply on narrow outputs (n = 32: no two B panels
// share an A panel) and a fifth of it on wide ones; nor is B where C is
// short or B small. Both paths do each output's sum in the same order, so
// they give the same bits (the packed one stays for tests).
// BenchmarkAsmGEMMVsOpenBLAS (bench/) measures it against OpenBLAS. It
// lives outside rt because a cgo package cannot hold Go assembly; the
// kernels exist on amd64 only.
package asmgemm
