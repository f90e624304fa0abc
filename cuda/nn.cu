/* softmax, log_softmax and layernorm, compiled after elementwise.cu and
 * reduce.cu as one NVRTC program. As the CPU backend: every row in double,
 * in the CPU's order, one thread per row (rows are short: a vocabulary or
 * a hidden dim), rounded to T once at the end. Only exp and log are the
 * GPU's (CUDA's double exp and log, within 1 ulp in double, so f32 results
 * nearly always equal the CPU's and f64 ones differ by an ulp or two).
 *
 * mr_softmax_<S>, mr_log_softmax_<S>: x viewed as [outer, n, inner],
 * normalised over n; ninf is -inf from the host (the running max starts
 * there, as the CPU's loop does). mr_layernorm_<S>: rows of h,
 * (x − mean)·(1/√(biased var + eps))·g + b. */

#define MR_SOFTMAX(OP, S, T, LOG) \
	MR_KERNEL mr_##OP##_##S(T *out, const T *x, long long outer, long long n, long long inner, double ninf) { \
		MR_GRID_LOOP(o, outer * inner) { \
			long long base = (o / inner) * n * inner + o % inner; \
			double mx = ninf, s = 0; \
			for (long long i = 0; i < n; i++) mx = mr_gomax(mx, (double)x[base + i * inner]); \
			for (long long i = 0; i < n; i++) s += exp((double)x[base + i * inner] - mx); \
			double ls = log(s); \
			for (long long i = 0; i < n; i++) { \
				double v = (double)x[base + i * inner] - mx; \
				out[base + i * inner] = (T)(LOG ? v - ls : exp(v) / s); \
			} \
		} \
	} \
	MR_EMU_SOFTMAX(mr_##OP##_##S, T)

/* mr_moments_<S>: a row's mean and 1/√(biased variance + eps) as the CPU's
 * rowMoments computes them: each sum in four interleaved partial sums,
 * added (a + b) + (c + d) (the CPU's sum4 and sumSqDev4). */
#define MR_MOMENTS(S, T) \
	__device__ __forceinline__ double mr_sum4_##S(const T *x, long long n) { \
		double a = 0, b = 0, c = 0, d = 0; \
		long long i = 0; \
		for (; i + 4 <= n; i += 4) { \
			a += (double)x[i]; b += (double)x[i + 1]; c += (double)x[i + 2]; d += (double)x[i + 3]; \
		} \
		for (; i < n; i++) a += (double)x[i]; \
		return (a + b) + (c + d); \
	} \
	__device__ __forceinline__ void mr_moments_##S(const T *x, long long n, double eps, double *mean, double *inv) { \
		double m = mr_sum4_##S(x, n) / (double)n, a = 0, b = 0, c = 0, d = 0; \
		long long i = 0; \
		for (; i + 4 <= n; i += 4) { \
			double u = (double)x[i] - m, v = (double)x[i + 1] - m, w = (double)x[i + 2] - m, z = (double)x[i + 3] - m; \
			a += u * u; b += v * v; c += w * w; d += z * z; \
		} \
		for (; i < n; i++) a += ((double)x[i] - m) * ((double)x[i] - m); \
		*mean = m; \
		*inv = 1 / sqrt(((a + b) + (c + d)) / (double)n + eps); \
	}

MR_MOMENTS(f32, float)
MR_MOMENTS(f64, double)

#define MR_LAYERNORM(S, T) \
	MR_KERNEL mr_layernorm_##S(T *out, const T *x, const T *g, const T *b, long long rows, long long h, double eps) { \
		MR_GRID_LOOP(r, rows) { \
			const T *row = x + r * h; \
			double mean, inv; \
			mr_moments_##S(row, h, eps, &mean, &inv); \
			for (long long i = 0; i < h; i++) \
				out[r * h + i] = (T)(((double)row[i] - mean) * inv * (double)g[i] + (double)b[i]); \
		} \
	} \
	MR_EMU_LAYERNORM(mr_layernorm_##S, T)

MR_SOFTMAX(softmax, f32, float, 0)
MR_SOFTMAX(log_softmax, f32, float, 1)
MR_SOFTMAX(softmax, f64, double, 0)
MR_SOFTMAX(log_softmax, f64, double, 1)
MR_LAYERNORM(f32, float)
MR_LAYERNORM(f64, double)

/* The gradient helpers, likewise in double in the CPU's order, one thread
 * per row: softmax_grad y·(g − Σ y·g) over the axis ([outer, n, inner]);
 * normalize (x − μ)/σ over the last dim, and normalize_grad, given the
 * incoming gradient d, (d − mean(d) − x̂·mean(d·x̂))/σ (d is unused by
 * normalize). */
#define MR_SOFTMAX_GRAD(S, T) \
	MR_KERNEL mr_softmax_grad_##S(T *out, const T *y, const T *g, long long outer, long long n, long long inner) { \
		MR_GRID_LOOP(o, outer * inner) { \
			long long base = (o / inner) * n * inner + o % inner; \
			double dot = 0; \
			for (long long i = 0; i < n; i++) dot += (double)y[base + i * inner] * (double)g[base + i * inner]; \
			for (long long i = 0; i < n; i++) { \
				long long k = base + i * inner; \
				out[k] = (T)((double)y[k] * ((double)g[k] - dot)); \
			} \
		} \
	} \
	MR_EMU_SMGRAD(mr_softmax_grad_##S, T)

#define MR_NORMALIZE(OP, S, T, GRAD) \
	MR_KERNEL mr_##OP##_##S(T *out, const T *x, const T *d, long long rows, long long h, double eps) { \
		MR_GRID_LOOP(r, rows) { \
			const T *row = x + r * h; \
			double mean, inv; \
			mr_moments_##S(row, h, eps, &mean, &inv); \
			if (!GRAD) { \
				for (long long i = 0; i < h; i++) out[r * h + i] = (T)(((double)row[i] - mean) * inv); \
				continue; \
			} \
			const T *dr = d + r * h; \
			double md = mr_sum4_##S(dr, h) / (double)h, m0 = 0, m1 = 0; /* Σ d·x̂ in two partial sums, as the CPU */ \
			long long i = 0; \
			for (; i + 2 <= h; i += 2) { \
				m0 += (double)dr[i] * ((double)row[i] - mean) * inv; \
				m1 += (double)dr[i + 1] * ((double)row[i + 1] - mean) * inv; \
			} \
			if (i < h) m0 += (double)dr[i] * ((double)row[i] - mean) * inv; \
			double mdx = (m0 + m1) / (double)h; \
			for (long long i = 0; i < h; i++) \
				out[r * h + i] = (T)(((double)dr[i] - md - ((double)row[i] - mean) * inv * mdx) * inv); \
		} \
	} \
	MR_EMU_NORMALIZE(mr_##OP##_##S, T)

MR_SOFTMAX_GRAD(f32, float)
MR_SOFTMAX_GRAD(f64, double)
MR_NORMALIZE(normalize, f32, float, 0)
MR_NORMALIZE(normalize_grad, f32, float, 1)
MR_NORMALIZE(normalize, f64, double, 0)
MR_NORMALIZE(normalize_grad, f64, double, 1)
