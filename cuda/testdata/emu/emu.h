/* emu.h: just enough of CUDA's vocabulary for the kernels in
 * elementwise.cu to compile as C or C++ on a machine without a GPU.
 * blockIdx, threadIdx, blockDim and gridDim are globals that emu_launch
 * sets before calling the kernel once per (block, thread), so a kernel runs
 * exactly the grid a GPU would, one thread after another. That is faithful
 * for kernels whose threads do not talk to each other (no __shared__, no
 * __syncthreads, no atomics) — the elementwise ones; it says nothing about
 * speed, memory or the GPU's math library. */
#ifndef MR_EMU_H
#define MR_EMU_H
#include <math.h>

#define __global__
#define __device__ static
#define __forceinline__ inline

typedef struct { unsigned int x, y, z; } mr_dim3;
extern mr_dim3 blockIdx, threadIdx, blockDim, gridDim;

/* EMU_LAUNCH(grid, block, call) runs call once per thread of a 1-D grid. */
#define EMU_LAUNCH(grid, block, call) do { \
	gridDim.x = (grid); blockDim.x = (block); gridDim.y = gridDim.z = blockDim.y = blockDim.z = 1; \
	for (blockIdx.x = 0; blockIdx.x < gridDim.x; blockIdx.x++) \
		for (threadIdx.x = 0; threadIdx.x < blockDim.x; threadIdx.x++) { call; } \
} while (0)

/* With MR_EMU_ENTRIES, each kernel NAME gets an entry point
 * NAME__emu(grid, block, params) that unpacks the driver's argument list
 * (params[i] points at argument i, as cuLaunchKernel's kernelParams) and
 * runs the grid: the fake libcuda of the backend's tests calls these. */
#ifdef MR_EMU_ENTRIES
#ifdef __cplusplus
#define MR_EMU_C extern "C"
#else
#define MR_EMU_C
#endif
#define MR_EMU_ENTRY(NAME, CALL) \
	MR_EMU_C void NAME##__emu(unsigned grid, unsigned block, void **p) { EMU_LAUNCH(grid, block, CALL); }
#define MR_EMU_UNARY(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(long long *)p[2]))
#define MR_EMU_BINARY(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], *(long long *)p[3], *(mr_bcast *)p[4]))
#define MR_EMU_COPY(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(const T **)p[1], *(long long *)p[2], *(mr_bcast *)p[3]))
#define MR_EMU_FILL(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(long long *)p[1], *(unsigned long long *)p[2]))
#define MR_EMU_MOMENT(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], *(const T **)p[3], *(long long *)p[4]))
#define MR_EMU_UPDATE(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], \
	*(const T **)p[3], *(const T **)p[4], *(const T **)p[5], *(const T **)p[6], *(const T **)p[7], *(long long *)p[8]))
#define MR_EMU_REDUCE(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(long long *)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(double *)p[5], *(double *)p[6]))
#define MR_EMU_MSE(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], *(long long *)p[3], *(double *)p[4]))
#define MR_EMU_SOFTMAX(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(long long *)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(double *)p[5]))
#define MR_EMU_LAYERNORM(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], \
	*(const T **)p[3], *(long long *)p[4], *(long long *)p[5], *(double *)p[6]))
#define MR_EMU_SMGRAD(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(long long *)p[5]))
#define MR_EMU_NORMALIZE(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(double *)p[5]))
#define MR_EMU_EMBED(NAME, T, I) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const I **)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(long long *)p[5], *(long long *)p[6], *(long long *)p[7], *(long long **)p[8]))
#define MR_EMU_EMBED_GRAD(NAME, T, I) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(double **)p[1], *(const I **)p[2], \
	*(const T **)p[3], *(long long *)p[4], *(long long *)p[5], *(long long *)p[6], *(long long *)p[7]))
#define MR_EMU_XENT(NAME, T, I) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const I **)p[2], \
	*(long long *)p[3], *(long long *)p[4], *(double *)p[5], *(double *)p[6], *(long long **)p[7]))
#define MR_EMU_XENT_GRAD(NAME, T, I) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const I **)p[2], \
	*(const T **)p[3], *(long long *)p[4], *(long long *)p[5], *(double *)p[6], *(double *)p[7], *(long long **)p[8]))
#define MR_EMU_ARANGE(NAME) MR_EMU_ENTRY(NAME, NAME(*(float **)p[0], *(long long *)p[1]))
#define MR_EMU_CAST(NAME, FT, TT) MR_EMU_ENTRY(NAME, NAME(*(TT **)p[0], *(const FT **)p[1], *(long long *)p[2]))
#define MR_EMU_MAXGRAD(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], \
	*(const T **)p[3], *(long long *)p[4], *(long long *)p[5], *(long long *)p[6]))
#define MR_EMU_WHERE(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(const T **)p[1], *(const T **)p[2], *(const T **)p[3], *(long long *)p[4]))
/* comm.cu's collective kernels (their argument structs are defined there) */
#define MR_EMU_REDUCE_ROWS(NAME) MR_EMU_ENTRY(NAME, \
	NAME(*(mr_members *)p[0], *(mr_members *)p[1], *(long long *)p[2], *(long long *)p[3], *(mr_rows *)p[4]))
#define MR_EMU_COPY_ROWS(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(mr_members *)p[0], *(const T **)p[1], *(mr_rows *)p[2]))
#define MR_EMU_TREE(NAME, T) MR_EMU_ENTRY(NAME, \
	NAME(*(T **)p[0], *(mr_members *)p[1], *(long long *)p[2], *(long long *)p[3]))
#endif
#endif
