// Package cuda is meshrun's CUDA backend: an rt.Backend on one NVIDIA GPU
// through the driver API, NVRTC and cuBLAS, all loaded at run time, and
// `--backend cuda` (internal/cli) to use it. Its tests run against a fake
// driver on the CPU (see Testing) and, through bench/gpu.sh, on a GPU. On
// an NVIDIA H200 (2026-11-30) the op, collective, NCCL (one rank),
// timeline and example tests passed but for half-precision training
// variants held to f32-ulp bounds; those bounds were changed after the
// last run, which has not been repeated on a GPU.
//
// # The backend
//
// Open makes a GPU's primary context (cuDevicePrimaryCtxRetain: the one
// cuBLAS's runtime shares; the CLI's GPU is ChooseDevice's), one stream
// and a cuBLAS handle, and compiles the kernels (KernelSource:
// elementwise.cu, memory.cu, optim.cu, reduce.cu, nn.cu and gather.cu as
// one program) with NVRTC for the device's architecture (sm_90 on Hopper;
// --fmad=false, so no a·b+c is fused where the CPU rounds twice), keeping
// the CUBIN in a disk cache (CacheDir) keyed by source, architecture, options
// and NVRTC version; a GPU newer than the NVRTC gets PTX for the newest
// architecture NVRTC knows, which the driver JIT-compiles. Every C call first makes that context current on the
// calling OS thread, since goroutines move between threads, so one
// Backend serves every rank of a local run: several logical devices on
// one GPU, each rank's buffers its own.
//
// All device work (kernels, cuBLAS, device-to-device copies) is issued on
// the one stream; host copies and memsets are the driver's synchronous
// calls on the legacy default stream, which orders itself with the stream
// both ways. So everything happens in issue order, and freed buffers go
// to a caching allocator (by size) and are handed out again at once:
// whatever still reads a freed block was issued before whatever writes it
// next. A failed allocation empties the cache and tries once more.
//
// Native ops: the elementwise kernels (BinaryOps with NumPy broadcasting
// by strides, UnaryOps), matmul, transpose (a box copy with permuted
// strides), const, Adam's fused ops (optim.cu; the plan's adam_fused as
// one kernel through LaunchResults, optim.go), and sum, mean, max and
// mse (reduce.cu: double accumulation in the CPU's order, one thread per
// output, so bit for bit with the CPU), softmax, log_softmax, layernorm,
// softmax_grad, normalize and normalize_grad (nn.cu: likewise in double,
// one thread per row) in f32 and f64; embedding, cross_entropy and their
// gradients (gather.cu) in f32 and f64 with i32 or i64 indices (an index
// out of range comes back through a flag the kernel sets); reshape (a
// device copy) and the slice, pad and concat ops (box copies) in every
// dtype; broadcast_to, cast between f32 and f64, arange, axis_index; Slice and Embed (box copies and a -inf fill, per
// element size) in every dtype. matmul is cuBLAS: row-major C = A·B is
// column-major Cᵀ = Bᵀ·Aᵀ, so cublasGemmEx (one GEMM when B has no batch
// dims, A's batch folded into rows) or cublasGemmStridedBatchedEx (batch
// dims whole or absent on each side) gets B first with the dims swapped;
// other batch broadcasts are a GEMM per batch. f32 GEMMs compute in f32
// (CUBLAS_COMPUTE_32F, default math: no TF32); bf16 and f16 GEMMs take
// half operands, compute in f32 and round the result once.
//
// bf16 and f16 ops run as the CPU runs them (half.go): half operands
// widened to f32, the f32 kernel, the result rounded once, the
// conversions being kernels on bit patterns equal to rt's; so a half op
// is native exactly when its f32 form is.
//
// where, max_grad, nonfinite, to_local and from_local are native too
// (misc.go), so every op of the CPU backend has a kernel in f32 and f64
// (FallbackOps is empty). An op whose dtypes have none (an integer cast)
// falls back explicitly: its arguments are copied to the host, the CPU backend's
// kernel runs, the result is copied in. The first fallback of each op and
// dtype prints one line on the notify writer (stderr under the CLI), and
// Backend.Fallbacks counts them. Correct, but slow where it happens often.
//
// Collectives among the logical ranks sharing the GPU run on it (comm.go,
// comm.cu): the backend is an rt.DeviceCollectives, whose kernels read
// every member's buffer at once, in the ring's order (rt/comm_dev.go has
// the protocol); sends between them are device copies. Between processes,
// one rank per GPU (under MPI or the rendezvous variables), NCCLComm
// (nccl.go) runs each plan group's collectives with NCCL on device
// buffers; sends there, and the launcher's messages, go through the host
// communicator (MPI or TCP), reading a Buf through its host copy
// (rt.HostReader).
//
// Timeline (events.go): the backend is an rt.DeviceClock. When a command
// shows the timeline (rt.Options.DeviceTime), each rank's stopwatch
// records CUDA events on the stream around every instruction's work, and
// the rank's timeline becomes their spans: GPU time, not launch time. The
// ranks sharing the GPU take turns at exclusive spans (compute and local
// steps), so their compute spans never overlap on the GPU's clock.
//
// Errors name the call and the library's name for the status:
// "cuda: cuMemAlloc (4096 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)" (from
// cuGetErrorName), "cuda: cublasGemmEx: CUBLAS_STATUS_EXECUTION_FAILED
// (13) [2×3·3×2 ×1 f32]", and NVRTC's log after a compile error.
//
// # Testing
//
// testdata/fake/fake.c is a fake libcuda + NVRTC + cuBLAS(Lt), built by
// the tests with cc and loaded through MESHRUN_*_LIB: device memory is
// malloc'd host memory, every copy and GEMM operand is checked to lie in
// a live allocation, every call needs a current context on its thread,
// NVRTC "compiles" the kernels as C++ under testdata/emu/emu.h into a
// shared library whose bytes are the CUBIN, cuLaunchKernel runs the grid one
// thread at a time from the driver's argument list, cuBLAS's GEMMs are
// loops with cuBLAS's argument checks. Against it every line of the
// backend runs: op-by-op comparisons with the CPU backend, every example
// in examples/ (inference and training, with variants: every pipeline
// schedule, ZeRO 0-3, f16, accumulation; several ranks sharing the
// device) against the CPU and one device, the compile cache, injected failures. NVRTC needs
// no GPU: nvrtc_test.go compiles the program with a real NVRTC when one is
// found (it passed with NVRTC 11.8, for sm_80 and sm_90). What only a GPU
// can check: the CUBIN loading and running, the GPU's math library
// (ulps), real launches and their limits, the driver's stream semantics,
// cuBLAS itself, speed. With MESHRUN_TEST_GPU=1 the same tests run on
// the real driver (skipping without one; MESHRUN_REQUIRE_GPU=1 makes that
// a failure): bench/gpu.sh does that, on binaries from bench/gpu_build.sh.
//
// # Loading
//
// libcuda (the driver API), NVRTC, cuBLAS, cuBLASLt and NCCL are opened
// with dlopen by a small C shim (shim_cgo.go), so building needs nothing
// from CUDA and a machine without it only learns so when Load is called.
// For each library the search (search.go) is, in order:
//
//  1. its environment variable (MESHRUN_CUDA_LIB, MESHRUN_NVRTC_LIB,
//     MESHRUN_CUBLAS_LIB, MESHRUN_CUBLASLT_LIB, MESHRUN_NCCL_LIB) alone,
//     when set: a file, or a folder holding the library;
//  2. the bare soname (libcuda.so.1, libnvrtc.so.13, ...), which the
//     dynamic loader resolves through LD_LIBRARY_PATH and ld.so.cache —
//     where the driver package puts libcuda.so.1;
//  3. for libcuda, the driver's folders outside the cache (containers'
//     /usr/local/nvidia/lib64, WSL's /usr/lib/wsl/lib, the multiarch and
//     lib64 folders); for the toolkit libraries, $CUDA_HOME/lib64,
//     $CUDA_PATH/lib64, /usr/local/cuda/lib64, /usr/local/cuda-*/lib64 and
//     /opt/cuda/lib64;
//  4. the folders NVIDIA's pip wheels (the ones PyTorch installs) use under
//     every site-packages or dist-packages folder of $VIRTUAL_ENV,
//     $CONDA_PREFIX, ~/.local, /usr/local, /usr and /opt/conda:
//     nvidia/cu13/lib (CUDA 13 wheels group cuBLAS and NVRTC there),
//     nvidia/cublas/lib, nvidia/cuda_nvrtc/lib, nvidia/nccl/lib (CUDA 12
//     wheels, and NCCL in both).
//
// CUDA 13 sonames are tried before CUDA 12's. A library that is not found
// is one line naming every file tried and why each failed. cuBLAS needs
// cuBLASLt: loading cuBLAS loads cuBLASLt first, so cuBLAS's own reference
// to it resolves to the copy already in memory (glibc matches sonames).
//
// # Kernels
//
// elementwise.cu holds the CUDA C of the elementwise ops (binary ones with
// NumPy broadcasting by strides, see BroadcastFor), memory.cu the box
// copies and fills, for NVRTC. They are kept to the subset that also
// compiles as C and C++, so a test compiles elementwise.cu with the system
// C compiler under testdata/emu/emu.h, which emulates the grid one thread
// at a time, and compares every op with the CPU backend (rt); the fake
// driver builds both the same way. That checks arithmetic, indexing and
// broadcasting; NVRTC, the GPU's math library, launches, memory and speed
// need a GPU.
//
// # Calling convention
//
// Go never calls into these libraries through a Go-side ABI: each entry
// point is called by a C wrapper in the shim with its C prototype. That
// matters for NCCL, whose ncclUniqueId is a 128-byte struct passed by
// value to ncclCommInitRank: on x86-64 and arm64 such a struct travels in
// memory laid out by the C compiler, so the wrapper takes a pointer from
// Go and dereferences it in C (nccl_cgo.go). The fake NCCL at the end of
// testdata/fake/fake.c — a communicator shared by processes through a
// file under /dev/shm — refuses an id whose checksum, carried in its last
// bytes, does not match, so an id passed other than by value fails.
package cuda
