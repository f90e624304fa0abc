/* Adam's fused optimizer ops, compiled after elementwise.cu as one NVRTC
 * program, with the CPU backend's arithmetic in the same order (NVRTC is
 * told --fmad=false, so nothing is contracted into a fused multiply-add
 * the CPU does not do):
 *
 *   adam_moment  out = m·β + g·(1−β)
 *   adam_moment2 out = m·β + (g·g)·(1−β)
 *   adam_update  out = p·decay − step·(m / (√v / rootBC2 + ε))
 *
 * The scalars (β; step, rootBC2, ε, decay) are one-element device tensors,
 * read by every thread. */

#define MR_ADAM(S, T, SQRT) \
	MR_KERNEL mr_adam_moment_##S(T *out, const T *m, const T *g, const T *beta, long long n) { \
		T b = beta[0], w = (T)1 - b; \
		MR_GRID_LOOP(i, n) { out[i] = m[i] * b + g[i] * w; } \
	} \
	MR_EMU_MOMENT(mr_adam_moment_##S, T) \
	MR_KERNEL mr_adam_moment2_##S(T *out, const T *m, const T *g, const T *beta, long long n) { \
		T b = beta[0], w = (T)1 - b; \
		MR_GRID_LOOP(i, n) { out[i] = m[i] * b + g[i] * g[i] * w; } \
	} \
	MR_EMU_MOMENT(mr_adam_moment2_##S, T) \
	MR_KERNEL mr_adam_update_##S(T *out, const T *p, const T *m, const T *v, const T *step, \
		const T *rootBC2, const T *eps, const T *decay, long long n) { \
		T st = step[0], rb = rootBC2[0], e = eps[0], dc = decay[0]; \
		MR_GRID_LOOP(i, n) { \
			T denom = SQRT(v[i]) / rb + e; \
			out[i] = p[i] * dc - st * (m[i] / denom); \
		} \
	} \
	MR_EMU_UPDATE(mr_adam_update_##S, T)

MR_ADAM(f32, float, sqrtf)
MR_ADAM(f64, double, sqrt)
