/* Collective kernels for logical ranks sharing one GPU (rt/comm_dev.go),
 * compiled after memory.cu (they use its half conversions). A member's
 * part of a collective is one launch that reads every member's buffer
 * and may write into every member's result: the pointers come by value
 * in an mr_members (at most MR_MAX_MEMBERS of them), so a launch needs
 * no table in device memory. Rows are mr_rows: count rows of len
 * elements, row r at src + r·sstride in a source, dst + r·dstride in a
 * destination.
 *
 * Reductions add in the ring's order, as the host's shared-memory path
 * (rt/comm_shm_loops.go), so results are bitwise the CPU's (but for the
 * payload of a NaN a sum makes: the GPU's is 0x7fffffff): a left fold
 * over the members from member `first` round the ring; max keeps the
 * running value unless it is greater than the member's (ties and NaNs
 * resolve as there). Half precision sums fold in f32 from member 0 and
 * round once; half max compares widened values and keeps the winner's
 * bits. The tree reduce is Ring.Reduce's binomial tree (treeSum): virtual
 * rank u holds its value plus, in turn, the sums of its children u+1,
 * u+2, u+4, ... below its lowest set bit. */

#define MR_MAX_MEMBERS 32

typedef struct {
	long long n;
	unsigned long long p[MR_MAX_MEMBERS];
} mr_members;

typedef struct {
	long long count, len, src, sstride, dst, dstride;
} mr_rows;

#ifndef MR_EMU_ENTRIES
#define MR_EMU_REDUCE_ROWS(NAME)
#define MR_EMU_COPY_ROWS(NAME, T)
#define MR_EMU_TREE(NAME, T)
#endif

__device__ __forceinline__ float mr_f32_of(unsigned int b) {
	union { unsigned int u; float f; } c;
	c.u = b;
	return c.f;
}

__device__ __forceinline__ unsigned int mr_bits_of(float f) {
	union { unsigned int u; float f; } c;
	c.f = f;
	return c.u;
}

/* The element of member m's buffer at offset o, and a store into out o. */
#define MR_AT(T, set, m, o) (((const T *)(set).p[m])[o])
#define MR_PUT(T, set, k, o) (((T *)(set).p[k])[o])

/* mr_reduce_rows_<S>: every buffer of outs gets, at the rows' dst
 * offsets, the fold of the members' elements at the src offsets. */
#define MR_REDUCE_ROWS(S, T) \
	MR_KERNEL mr_reduce_rows_##S(mr_members outs, mr_members in, long long first, long long op, mr_rows r) { \
		MR_GRID_LOOP(i, r.count * r.len) { \
			long long row = r.count == 1 ? 0 : i / r.len, col = i - row * r.len, p = in.n; \
			long long so = r.src + row * r.sstride + col, d = r.dst + row * r.dstride + col; \
			long long m = first % p; \
			T acc = MR_AT(T, in, m, so); \
			for (long long k = 1; k < p; k++) { \
				m = m + 1 == p ? 0 : m + 1; /* round the ring, no division */ \
				T v = MR_AT(T, in, m, so); \
				if (op == 0) { \
					acc = acc + v; \
				} else if (!(acc > v)) { \
					acc = v; \
				} \
			} \
			for (long long k = 0; k < outs.n; k++) MR_PUT(T, outs, k, d) = acc; \
		} \
	} \
	MR_EMU_REDUCE_ROWS(mr_reduce_rows_##S)

MR_REDUCE_ROWS(f32, float)
MR_REDUCE_ROWS(f64, double)
MR_REDUCE_ROWS(i32, int)
MR_REDUCE_ROWS(i64, long long)

/* The half-precision fold: WIDEN and NARROW convert bits. */
#define MR_REDUCE_ROWS_HALF(S, WIDEN, NARROW) \
	MR_KERNEL mr_reduce_rows_##S(mr_members outs, mr_members in, long long first, long long op, mr_rows r) { \
		MR_GRID_LOOP(i, r.count * r.len) { \
			long long row = r.count == 1 ? 0 : i / r.len, col = i - row * r.len, p = in.n; \
			long long so = r.src + row * r.sstride + col, d = r.dst + row * r.dstride + col; \
			unsigned short bits; \
			if (op == 0) { \
				float acc = mr_f32_of(WIDEN(MR_AT(unsigned short, in, 0, so))); \
				for (long long k = 1; k < p; k++) acc += mr_f32_of(WIDEN(MR_AT(unsigned short, in, k, so))); \
				bits = NARROW(mr_bits_of(acc)); \
			} else { \
				long long m = first % p; \
				bits = MR_AT(unsigned short, in, m, so); \
				float acc = mr_f32_of(WIDEN(bits)); \
				for (long long k = 1; k < p; k++) { \
					m = m + 1 == p ? 0 : m + 1; \
					unsigned short v = MR_AT(unsigned short, in, m, so); \
					float f = mr_f32_of(WIDEN(v)); \
					if (!(acc > f)) { \
						acc = f; \
						bits = v; \
					} \
				} \
			} \
			for (long long k = 0; k < outs.n; k++) MR_PUT(unsigned short, outs, k, d) = bits; \
		} \
	} \
	MR_EMU_REDUCE_ROWS(mr_reduce_rows_##S)

MR_REDUCE_ROWS_HALF(bf16, mr_bf16_bits, mr_bits_bf16)
MR_REDUCE_ROWS_HALF(f16, mr_f16_bits, mr_bits_f16)

/* mr_copy_rows_<b2|b4|b8>: x's rows into every buffer of outs. */
#define MR_COPY_ROWS(S, T) \
	MR_KERNEL mr_copy_rows_##S(mr_members outs, const T *x, mr_rows r) { \
		MR_GRID_LOOP(i, r.count * r.len) { \
			long long row = r.count == 1 ? 0 : i / r.len, col = i - row * r.len; \
			T v = x[r.src + row * r.sstride + col]; \
			long long d = r.dst + row * r.dstride + col; \
			for (long long k = 0; k < outs.n; k++) MR_PUT(T, outs, k, d) = v; \
		} \
	} \
	MR_EMU_COPY_ROWS(mr_copy_rows_##S, T)

MR_COPY_ROWS(b2, unsigned short)
MR_COPY_ROWS(b4, unsigned int)
MR_COPY_ROWS(b8, unsigned long long)

/* mr_tree_reduce_<S>: out = the binomial tree's sum of n elements, rooted
 * at member root (virtual rank u is member (u + root) mod p). W is the
 * type summed in; LOAD and STORE convert to and from it. */
#define MR_TREE(S, T, W, LOAD, STORE) \
	MR_KERNEL mr_tree_reduce_##S(T *out, mr_members in, long long root, long long n) { \
		MR_GRID_LOOP(i, n) { \
			W s[MR_MAX_MEMBERS]; \
			long long p = in.n; \
			for (long long u = p - 1; u >= 0; u--) { \
				W acc = LOAD(MR_AT(T, in, u + root < p ? u + root : u + root - p, i)); \
				long long low = u == 0 ? p : (u & -u); \
				for (long long m = 1; m < low && u + m < p; m <<= 1) acc += s[u + m]; \
				s[u] = acc; \
			} \
			out[i] = STORE(s[0]); \
		} \
	} \
	MR_EMU_TREE(mr_tree_reduce_##S, T)

#define MR_SAME(x) (x)
#define MR_BF16_F32(h) mr_f32_of(mr_bf16_bits(h))
#define MR_F32_BF16(f) mr_bits_bf16(mr_bits_of(f))
#define MR_F16_F32(h) mr_f32_of(mr_f16_bits(h))
#define MR_F32_F16(f) mr_bits_f16(mr_bits_of(f))

MR_TREE(f32, float, float, MR_SAME, MR_SAME)
MR_TREE(f64, double, double, MR_SAME, MR_SAME)
MR_TREE(i32, int, int, MR_SAME, MR_SAME)
MR_TREE(i64, long long, long long, MR_SAME, MR_SAME)
MR_TREE(bf16, unsigned short, float, MR_BF16_F32, MR_F32_BF16)
MR_TREE(f16, unsigned short, float, MR_F16_F32, MR_F32_F16)
