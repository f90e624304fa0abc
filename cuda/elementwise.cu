/* Elementwise kernels of meshrun's CUDA backend: CUDA C, compiled at run
 * time with NVRTC. The same text also compiles as plain C and C++ under
 * testdata/emu/emu.h, which stands in for the CUDA built-ins, so the
 * kernels' logic is tested on machines without a GPU (elementwise_test.go).
 * Keep it in the common subset: no templates, no overloading, no
 * headers; the math functions are the C99 ones (expf, erfcf, ...) that
 * both CUDA's device library and the C library provide.
 *
 * One thread per output element, in a grid-stride loop, so any grid size
 * covers any n. Binary ops broadcast like NumPy: the host passes the
 * output's shape and each operand's strides over it, 0 along broadcast
 * dims (mr_bcast), and each thread turns its flat index into the
 * operands' offsets. Names: mr_<op>_<f32|f64>. */

#ifdef __cplusplus
#define MR_KERNEL extern "C" __global__ void
#else
#define MR_KERNEL __global__ void
#endif

#define MR_MAX_DIMS 8

/* Every kernel is followed by a hook naming its signature. For NVRTC the
 * hooks are empty; the CPU emulation of the driver (testdata/emu/emu.h
 * with MR_EMU_ENTRIES) defines them to make, per kernel, an entry point
 * that runs the kernel's grid from the driver's argument list, so the
 * backend's own launches can be tested without a GPU. */
#ifndef MR_EMU_ENTRIES
#define MR_EMU_UNARY(NAME, T)
#define MR_EMU_BINARY(NAME, T)
#define MR_EMU_COPY(NAME, T)
#define MR_EMU_FILL(NAME, T)
#define MR_EMU_MOMENT(NAME, T)
#define MR_EMU_UPDATE(NAME, T)
#define MR_EMU_REDUCE(NAME, T)
#define MR_EMU_MSE(NAME, T)
#define MR_EMU_SOFTMAX(NAME, T)
#define MR_EMU_LAYERNORM(NAME, T)
#define MR_EMU_SMGRAD(NAME, T)
#define MR_EMU_NORMALIZE(NAME, T)
#define MR_EMU_EMBED(NAME, T, I)
#define MR_EMU_EMBED_GRAD(NAME, T, I)
#define MR_EMU_XENT(NAME, T, I)
#define MR_EMU_XENT_GRAD(NAME, T, I)
#define MR_EMU_ARANGE(NAME)
#define MR_EMU_CAST(NAME, FT, TT)
#define MR_EMU_MAXGRAD(NAME, T)
#define MR_EMU_WHERE(NAME, T)
#endif

/* Passed by value; every field 8 bytes, so the layout is the same on the
 * host (Go's cuda.Broadcast) and the device. */
typedef struct {
	long long ndim;
	long long shape[MR_MAX_DIMS]; /* the output's shape, outermost first */
	long long a[MR_MAX_DIMS];     /* a's stride along each output dim; 0: broadcast */
	long long b[MR_MAX_DIMS];
} mr_bcast;

#define MR_GRID_LOOP(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (long long)gridDim.x * blockDim.x)

/* minimum and maximum as Go's min and max (the CPU backend's definition):
 * a NaN operand gives NaN (fminf would drop it), and -0 is below +0. */
#define MR_HELPERS(T, S) \
	__device__ __forceinline__ T mr_gomin_##S(T x, T y) { \
		if (x != x || y != y) return x + y; \
		if (x == y) return signbit(x) ? x : y; \
		return x < y ? x : y; \
	} \
	__device__ __forceinline__ T mr_gomax_##S(T x, T y) { \
		if (x != x || y != y) return x + y; \
		if (x == y) return signbit(x) ? y : x; \
		return x > y ? x : y; \
	}

/* out[i] = EXPR(x, y) with x, y the broadcast operands' elements. */
#define MR_BINARY(OP, T, S, EXPR) \
	MR_KERNEL mr_##OP##_##S(T *out, const T *pa, const T *pb, long long n, mr_bcast bc) { \
		MR_GRID_LOOP(i, n) { \
			long long ia = 0, ib = 0, r = i; \
			for (long long d = bc.ndim - 1; d >= 0; d--) { \
				long long c = r % bc.shape[d]; \
				r /= bc.shape[d]; \
				ia += c * bc.a[d]; \
				ib += c * bc.b[d]; \
			} \
			T x = pa[ia], y = pb[ib]; \
			out[i] = (EXPR); \
		} \
	} \
	MR_EMU_BINARY(mr_##OP##_##S, T)

/* out[i] = EXPR(x) with x = in[i]; shapes are equal. */
#define MR_UNARY(OP, T, S, EXPR) \
	MR_KERNEL mr_##OP##_##S(T *out, const T *px, long long n) { \
		MR_GRID_LOOP(i, n) { \
			T x = px[i]; \
			out[i] = (EXPR); \
		} \
	} \
	MR_EMU_UNARY(mr_##OP##_##S, T)

/* Every op for element type T (suffix S; F is the suffix of T's math
 * functions: f for float, nothing for double). gelu is the exact form,
 * x·Φ(x) with Φ(x) = ½erfc(−x/√2): erfc keeps Φ's small values accurate
 * for negative x, where 1 + erf would cancel. gelu and gelu_grad run in
 * double for every T: erfc(t) and e^(−x²/2) turn a relative error δ of
 * their argument into about 2t²·δ of their value, so an f32 argument
 * rounded to f32 (δ = 2⁻²⁴) put f32 gelu 10 ulp off at x = −3 and 195 ulp
 * at x = −13; in double the argument's rounding is far below f32's ulp.
 * relu(NaN) is NaN and relu_grad(NaN) is 0, as on the CPU backend. */
#define MR_ALL(T, S, F) \
	MR_HELPERS(T, S) \
	MR_BINARY(add, T, S, x + y) \
	MR_BINARY(sub, T, S, x - y) \
	MR_BINARY(mul, T, S, x * y) \
	MR_BINARY(div, T, S, x / y) \
	MR_BINARY(minimum, T, S, mr_gomin_##S(x, y)) \
	MR_BINARY(maximum, T, S, mr_gomax_##S(x, y)) \
	MR_UNARY(neg, T, S, -x) \
	MR_UNARY(exp, T, S, exp##F(x)) \
	MR_UNARY(log, T, S, log##F(x)) \
	MR_UNARY(sqrt, T, S, sqrt##F(x)) \
	MR_UNARY(tanh, T, S, tanh##F(x)) \
	MR_UNARY(relu, T, S, x > 0 ? x : (x != x ? x : (T)0)) \
	MR_UNARY(relu_grad, T, S, x > 0 ? (T)1 : (T)0) \
	MR_UNARY(sigmoid, T, S, (T)1 / ((T)1 + exp##F(-x))) \
	MR_UNARY(gelu, T, S, (T)(0.5 * (double)x * erfc(-(double)x * 0.70710678118654752440))) \
	MR_UNARY(gelu_grad, T, S, \
		(T)(0.5 * erfc(-(double)x * 0.70710678118654752440) + \
		(double)x * exp(-0.5 * (double)x * (double)x) * 0.39894228040143267794))

MR_ALL(float, f32, f)
MR_ALL(double, f64, )
