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
#endif
