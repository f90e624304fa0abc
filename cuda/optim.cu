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

/* adam_fused (lower/fuse_adam.go): the three ops above in one pass, each
 * thread reading p, m, v and g once and writing p', m' and v'. The
 * expressions are the three kernels' own, in their order, so the results
 * are theirs bit for bit (and the CPU's adamFused): m' and v' are rounded
 * to T when stored in registers, exactly as the separate kernels round
 * them into memory before adam_update reads them.
 *
 * Its emulation hook is defined here rather than beside the others: it
 * is the one kernel with this signature. */
#ifdef MR_EMU_ENTRIES
#define MR_EMU_ADAM_FUSED(NAME, T) MR_EMU_ENTRY(NAME, NAME(*(T **)p[0], *(T **)p[1], *(T **)p[2], \
	*(const T **)p[3], *(const T **)p[4], *(const T **)p[5], *(const T **)p[6], *(const T **)p[7], \
	*(const T **)p[8], *(const T **)p[9], *(const T **)p[10], *(const T **)p[11], *(const T **)p[12], \
	*(long long *)p[13]))
#else
#define MR_EMU_ADAM_FUSED(NAME, T)
#endif

#define MR_ADAM_FUSED(S, T, SQRT) \
	MR_KERNEL mr_adam_fused_##S(T *np, T *nm, T *nv, const T *p, const T *m, const T *v, const T *g, \
		const T *beta1, const T *beta2, const T *step, const T *rootBC2, const T *eps, const T *decay, \
		long long n) { \
		T b1 = beta1[0], w1 = (T)1 - b1, b2 = beta2[0], w2 = (T)1 - b2; \
		T st = step[0], rb = rootBC2[0], e = eps[0], dc = decay[0]; \
		MR_GRID_LOOP(i, n) { \
			T gi = g[i]; \
			T mi = m[i] * b1 + gi * w1; \
			T vi = v[i] * b2 + gi * gi * w2; \
			T denom = SQRT(vi) / rb + e; \
			nm[i] = mi; \
			nv[i] = vi; \
			np[i] = p[i] * dc - st * (mi / denom); \
		} \
	} \
	MR_EMU_ADAM_FUSED(mr_adam_fused_##S, T)

MR_ADAM_FUSED(f32, float, sqrtf)
MR_ADAM_FUSED(f64, double, sqrt)
