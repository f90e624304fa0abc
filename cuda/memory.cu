/* Data-movement kernels of meshrun's CUDA backend, compiled after
 * elementwise.cu as one NVRTC program (it uses mr_bcast, MR_KERNEL and
 * MR_GRID_LOOP from there). They move elements without looking at them,
 * so there is one kernel per element size: b2 (bf16, f16), b4 (f32, i32),
 * b8 (f64, i64).
 *
 * mr_copy_box_<S> copies a box: n elements, the box's shape in bc.shape,
 * the destination's strides over it in bc.a and the source's in bc.b
 * (the host passes both pointers already moved to the box's corner). It
 * is Slice (box of the source into a dense buffer) and Embed (a dense
 * buffer into a box of the destination). mr_fill_<S> sets n elements to
 * one bit pattern (Embed's -inf). */

#define MR_COPY_BOX(S, T) \
	MR_KERNEL mr_copy_box_##S(T *dst, const T *src, long long n, mr_bcast bc) { \
		MR_GRID_LOOP(i, n) { \
			long long id = 0, is = 0, r = i; \
			for (long long d = bc.ndim - 1; d >= 0; d--) { \
				long long c = r % bc.shape[d]; \
				r /= bc.shape[d]; \
				id += c * bc.a[d]; \
				is += c * bc.b[d]; \
			} \
			dst[id] = src[is]; \
		} \
	} \
	MR_EMU_COPY(mr_copy_box_##S, T)

#define MR_FILL(S, T) \
	MR_KERNEL mr_fill_##S(T *out, long long n, unsigned long long bits) { \
		MR_GRID_LOOP(i, n) { out[i] = (T)bits; } \
	} \
	MR_EMU_FILL(mr_fill_##S, T)

MR_COPY_BOX(b2, unsigned short)
MR_COPY_BOX(b4, unsigned int)
MR_COPY_BOX(b8, unsigned long long)
MR_FILL(b2, unsigned short)
MR_FILL(b4, unsigned int)
MR_FILL(b8, unsigned long long)

/* mr_arange_f32: out[i] = i (the arange op, f32 as on the CPU).
 * mr_cast_<from>_<to>: f32 ↔ f64 conversion, rounding to nearest. */
MR_KERNEL mr_arange_f32(float *out, long long n) {
	MR_GRID_LOOP(i, n) { out[i] = (float)i; }
}
MR_EMU_ARANGE(mr_arange_f32)

#define MR_CAST(FS, FT, TS, TT) \
	MR_KERNEL mr_cast_##FS##_##TS(TT *out, const FT *x, long long n) { \
		MR_GRID_LOOP(i, n) { out[i] = (TT)x[i]; } \
	} \
	MR_EMU_CAST(mr_cast_##FS##_##TS, FT, TT)

MR_CAST(f32, float, f64, double)
MR_CAST(f64, double, f32, float)
