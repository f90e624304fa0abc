// Package asmgemm is meshrun's own SGEMM in Go assembly (issue 10: can a
// GEMM of our own reach 0.7× of OpenBLAS?), the default BLAS where
// OpenBLAS is absent (rt.AsmBLAS). It is row-major, for amd64, with two
// micro-kernels (kernel_amd64.s): 6×16 on AVX2/FMA and 12×32 on AVX-512F,
// over packed panels in the layout of the GotoBLAS/BLIS papers: B is
// packed kc×nr panel by panel and A mc×kc in mr-row panels, so the kernel
// streams both from cache; C is written once per kc block (overwritten on
// the first, added to after). An output at most one panel wide (n ≤ 32 on
// AVX-512) shares no A panel between B panels, so there the 12×32 kernel
// reads A's rows in place (sgemm12x32r) and B's rows serve as the panel
// when their stride is 32: packing would cost as much as the multiply.
// Both paths do each output's sum in the same order, so they give the
// same bits. BenchmarkAsmGEMMVsOpenBLAS (bench/) measures it against
// OpenBLAS. It lives outside rt because a cgo package cannot hold Go
// assembly; the kernels exist on amd64 only.
package asmgemm
