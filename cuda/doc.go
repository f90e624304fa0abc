// Package cuda is the groundwork of meshrun's CUDA backend: a run-time
// loader for NVIDIA's libraries and the CUDA C source of the elementwise
// kernels. It is not a backend yet: no rt.Backend is implemented or
// registered here, nothing in it has run on a GPU, and `--backend cuda`
// does not exist.
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
// NumPy broadcasting by strides, see BroadcastFor), for NVRTC. It is kept
// to the subset that also compiles as C and C++, so the test compiles it
// with the system C compiler under testdata/emu/emu.h, which emulates the
// grid one thread at a time, and compares every op with the CPU backend
// (rt). That checks arithmetic, indexing and broadcasting; NVRTC, the GPU's
// math library, launches, memory and speed need a GPU.
//
// # Calling convention
//
// Go never calls into these libraries through a Go-side ABI: each entry
// point is called by a C wrapper in the shim with its C prototype. That
// matters for NCCL, whose ncclUniqueId is a 128-byte struct passed by
// value to ncclCommInitRank: on x86-64 and arm64 such a struct travels in
// memory laid out by the C compiler, so the wrapper takes a pointer from
// Go and dereferences it in C (tested against a fake libnccl built by the
// test with the C compiler).
package cuda
