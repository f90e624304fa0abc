/* Reductions and the MSE loss, compiled after elementwise.cu as one NVRTC
 * program. They reproduce the CPU backend bit for bit: the sum runs in
 * double, element after element in the CPU's order, one thread per output
 * element (so a long reduction to few outputs runs on few threads: exact
 * and simple, not fast), and max follows Go's built-in max (mr_gomax:
 * NaN wins, and +0 is above -0).
 *
 * mr_<sum|mean|max>_<S>: x viewed as [outer, n, inner] reduced over n to
 * [outer, inner], starting from init; mean divides by div (the reduced dim's global length:
 * x may be one device's shard). mr_mse_<S>: Σ(a−b)² / div, one scalar. */

/* mr_gomax is Go's built-in max on float64, the CPU backend's max (in the
 * reduction, softmax and cross-entropy): NaN if either is NaN, +0 above
 * -0, else the larger. */
__device__ __forceinline__ double mr_gomax(double x, double y) {
	if (x != x) return x;
	if (y != y) return y;
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
	MR_REDUCE(max, S, T, mr_gomax(acc, e), acc) \
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

/* mr_max_grad_<S>: the gradient of max over [outer, n, inner]'s n: g
 * shared equally among the elements equal to the max y (ties), 0
 * elsewhere, in double; one thread per reduced row. mr_nonfinite_<S>: 1
 * when any element is ±inf or NaN, one thread. mr_where_<S>: a where
 * cond ≠ 0, else b (NaN counts as ≠ 0), on operands already broadcast. */
#define MR_MISC(S, T) \
	MR_KERNEL mr_max_grad_##S(T *out, const T *x, const T *y, const T *g, long long outer, long long n, long long inner) { \
		MR_GRID_LOOP(o, outer * inner) { \
			long long base = (o / inner) * n * inner + o % inner, ties = 0; \
			double m = (double)y[o], gr = (double)g[o]; \
			for (long long i = 0; i < n; i++) \
				if ((double)x[base + i * inner] == m) ties++; \
			for (long long i = 0; i < n; i++) { \
				long long k = base + i * inner; \
				out[k] = (T)((double)x[k] == m ? gr / (double)ties : 0.0); \
			} \
		} \
	} \
	MR_EMU_MAXGRAD(mr_max_grad_##S, T) \
	MR_KERNEL mr_nonfinite_##S(T *out, const T *x, long long n) { \
		MR_GRID_LOOP(o, 1) { \
			T r = 0; \
			for (long long i = 0; i < n; i++) { \
				double v = (double)x[i]; \
				if (v != v || v - v != 0) { r = 1; break; } \
			} \
			out[o] = r; \
		} \
	} \
	MR_EMU_UNARY(mr_nonfinite_##S, T) \
	MR_KERNEL mr_where_##S(T *out, const T *c, const T *a, const T *b, long long n) { \
		MR_GRID_LOOP(i, n) { out[i] = c[i] != 0 ? a[i] : b[i]; } \
	} \
	MR_EMU_WHERE(mr_where_##S, T)

MR_MISC(f32, float)
MR_MISC(f64, double)
