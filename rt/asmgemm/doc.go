// Package asmgemm is an experiment of issue 10: can a GEMM of our own, in
// Go assembly, reach 0.7× of OpenBLAS? It holds a row-major SGEMM for
// amd64 with two micro-kernels (kernel_amd64.s): 6×16 on AVX2/FMA and
// 12×32 on AVX-512F, over packed panels, in the layout of the GotoBLAS/BLIS papers: B is packed
// kc×nr panel by panel and A mc×kc in mr-row panels, so the kernel streams
// both from cache; C is written once per kc block (overwritten on the
// first, added to after). BenchmarkAsmGEMMVsOpenBLAS (bench/) measures it
// against OpenBLAS; meshrun does not use it (it lives outside rt because
// a cgo package cannot hold Go assembly).
// The kernel exists on amd64 only.
package asmgemm
