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

/* Half precision, on bit patterns (no float type needed): widening bf16
 * or f16 to f32 bits, and rounding f32 bits to bf16 or f16 to nearest,
 * ties to even, as the CPU backend's F32ToBF16/F32ToF16 (NaN stays a
 * quiet NaN; f16 has subnormals and overflows to ±inf). A half op runs as
 * the CPU runs it: operands widened, the f32 kernel, the result narrowed
 * once. The conversions are device functions too (mr_bf16_bits, ...),
 * for kernels that fold half values in f32 (comm.cu). */
__device__ __forceinline__ unsigned int mr_bf16_bits(unsigned short h) { return (unsigned int)h << 16; }

__device__ __forceinline__ unsigned short mr_bits_bf16(unsigned int b) {
	if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0) {
		return (unsigned short)((b >> 16) | 0x40);
	}
	b += 0x7fffu + ((b >> 16) & 1u);
	return (unsigned short)(b >> 16);
}

__device__ __forceinline__ unsigned int mr_f16_bits(unsigned int h) {
	unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
	if (exp == 0 && man == 0) {
		return sign;
	}
	if (exp == 0) { /* subnormal: normalise */
		unsigned int e = 127 - 15 + 1;
		while ((man & 0x400u) == 0) {
			man <<= 1;
			e--;
		}
		return sign | e << 23 | (man & 0x3ffu) << 13;
	}
	if (exp == 0x1f) {
		return sign | 0xffu << 23 | man << 13;
	}
	return sign | (exp + 127 - 15) << 23 | man << 13;
}

__device__ __forceinline__ unsigned short mr_bits_f16(unsigned int b) {
	unsigned int man = b & 0x7fffffu, r;
	unsigned int sign = (b >> 16) & 0x8000u;
	int exp = (int)((b >> 23) & 0xffu), e = exp - 127 + 15;
	if (exp == 0xff) {
		r = sign | (man != 0 ? 0x7e00u : 0x7c00u);
	} else if (exp == 0 && man == 0) {
		r = sign;
	} else if (e >= 0x1f) {
		r = sign | 0x7c00u; /* overflow */
	} else if (e <= 0) {
		if (e < -10) {
			r = sign; /* underflow to zero */
		} else {
			unsigned int m = man | 0x800000u, shift = (unsigned int)(14 - e);
			unsigned int half = 1u << (shift - 1), q = m >> shift, rem = m & ((1u << shift) - 1);
			if (rem > half || (rem == half && (q & 1u))) q++;
			r = sign | q;
		}
	} else {
		unsigned int q = (unsigned int)e << 10 | man >> 13, rem = man & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++; /* may carry up to inf: correct */
		r = sign | q;
	}
	return (unsigned short)r;
}

/* mr_<widen|narrow>_<bf16|f16>: out[i] = CONV(x[i]) over bit patterns. */
#define MR_CONVERT(NAME, FT, TT, CONV) \
	MR_KERNEL NAME(TT *out, const FT *x, long long n) { \
		MR_GRID_LOOP(i, n) { out[i] = CONV(x[i]); } \
	} \
	MR_EMU_CAST(NAME, FT, TT)

MR_CONVERT(mr_widen_bf16, unsigned short, unsigned int, mr_bf16_bits)
MR_CONVERT(mr_narrow_bf16, unsigned int, unsigned short, mr_bits_bf16)
MR_CONVERT(mr_widen_f16, unsigned short, unsigned int, mr_f16_bits)
MR_CONVERT(mr_narrow_f16, unsigned int, unsigned short, mr_bits_f16)
