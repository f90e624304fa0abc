/* Reductions and the MSE loss, compiled after elementwise.cu as one NVRTC
 * program. They reproduce the CPU backend bit for bit: the sum runs in
 * double, element after element in the CPU's order, one thread per output
 * element (so a long reduction to few outputs runs on few threads: exact
 * and simple, not fast), and max follows Go's math.Max (mr_mathmax: +inf
 * wins even over NaN, then NaN, and +0 is above -0).
 *
 * mr_<sum|mean|max>_<S>: x viewed as [outer, n, inner] reduced over n to
 * [outer, inner], starting from init; mean divides by div (the reduced dim's global length:
 * x may be one device's shard). mr_mse_<S>: Σ(a−b)² / div, one scalar. */

/* mr_mathmax is Go's math.Max, the CPU backend's max reduction: its
 * special cases in its order. 1.7976931348623157e308 is the largest
 * double, so only +inf is above it. */
__device__ __forceinline__ double mr_mathmax(double x, double y) {
	if (x > 1.7976931348623157e308) return x;
	if (y > 1.7976931348623157e308) return y;
	if (x != x || y != y) return x + y;
	if (x == 0 && y == 0) return signbit(x) ? y : x;
	return x > y ? x : y;
}

#define MR_REDUCE(OP, S, T, ACC, FINISH) \
	MR_KERNEL mr_##OP##_##S(T *out, const T *x, long long outer, long long n, long long inner, double init, double div) { \
		MR_GRID_LOOP(o, outer * inner) { \
			long long a = o / inner, c = o % inner; \
			double acc = init; \
			for (long long i = 0; i < n; i++) { \
				double e = (double)x[(a * n + i) * inner + c]; \
				acc = ACC; \
			} \
			out[o] = (T)(FINISH); \
		} \
	} \
	MR_EMU_REDUCE(mr_##OP##_##S, T)

/* init is the host's: 0, or -inf for max (a constant -inf would need a
 * header or a division by zero at compile time). */
#define MR_REDUCTIONS(S, T) \
	MR_REDUCE(sum, S, T, acc + e, acc) \
	MR_REDUCE(mean, S, T, acc + e, acc / div) \
	MR_REDUCE(max, S, T, mr_mathmax(acc, e), acc) \
	MR_KERNEL mr_mse_##S(T *out, const T *pa, const T *pb, long long n, double div) { \
		MR_GRID_LOOP(o, 1) { \
			double s = 0; \
			for (long long i = 0; i < n; i++) { \
				double d = (double)pa[i] - (double)pb[i]; \
				s += d * d; \
			} \
			out[o] = (T)(s / div); \
		} \
	} \
	MR_EMU_MSE(mr_mse_##S, T)

MR_REDUCTIONS(f32, float)
MR_REDUCTIONS(f64, double)
