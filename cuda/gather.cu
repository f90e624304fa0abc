/* Embedding and cross-entropy, forward and backward, compiled after
 * elementwise.cu, reduce.cu and nn.cu as one NVRTC program: kernels that
 * index with an integer tensor (I: long long or int, suffix i64 / i32).
 * As the CPU backend: in double where it sums, in its order.
 *
 * An index out of range is the CPU's error: the kernel writes bad[0] = 1
 * and bad[1] = the index (some offending one, when several threads find
 * one), and the host reads them back after the launch.
 *
 * mr_embedding_<S>_<I>: out[i, j] = w[idx[i] − off, j] where that row is
 *   this device's block of the table (rows from off), else 0; idx outside
 *   [0, vocab) is bad. One thread per output element.
 * mr_embedding_grad_<S>_<I>: the table block's gradient, g's rows added
 *   into the rows idx names, in idx's order, in double (acc, zeroed by the
 *   host, rows × h); one thread per table row, scanning idx.
 * mr_cross_entropy_<S>_<I>: Σ_rows logsumexp(row) − row[label], / N; one
 *   thread, rows in order. mr_cross_entropy_grad_<S>_<I>: (softmax(row) −
 *   onehot(label))·g/N, one thread per row. */

#define MR_GATHER(S, T, IS, I) \
	MR_KERNEL mr_embedding_##S##_##IS(T *out, const T *w, const I *idx, long long n, long long h, long long rows, \
		long long off, long long vocab, long long *bad) { \
		MR_GRID_LOOP(o, n * h) { \
			long long id = (long long)idx[o / h], r = id - off; \
			if (id < 0 || id >= vocab) { bad[0] = 1; bad[1] = id; } \
			out[o] = (r >= 0 && r < rows && id < vocab) ? w[r * h + o % h] : (T)0; \
		} \
	} \
	MR_EMU_EMBED(mr_embedding_##S##_##IS, T, I) \
	MR_KERNEL mr_embedding_grad_##S##_##IS(T *out, double *acc, const I *idx, const T *g, long long n, long long rows, \
		long long h, long long off) { \
		MR_GRID_LOOP(r, rows) { \
			double *a = acc + r * h; \
			for (long long i = 0; i < n; i++) \
				if ((long long)idx[i] - off == r) \
					for (long long j = 0; j < h; j++) a[j] += (double)g[i * h + j]; \
			for (long long j = 0; j < h; j++) out[r * h + j] = (T)a[j]; \
		} \
	} \
	MR_EMU_EMBED_GRAD(mr_embedding_grad_##S##_##IS, T, I) \
	MR_KERNEL mr_cross_entropy_##S##_##IS(T *out, const T *x, const I *lab, long long n, long long c, double div, \
		double ninf, long long *bad) { \
		MR_GRID_LOOP(o, 1) { \
			double total = 0; \
			for (long long r = 0; r < n; r++) { \
				const T *row = x + r * c; \
				long long l = (long long)lab[r]; \
				if (l < 0 || l >= c) { bad[0] = 1; bad[1] = l; break; } \
				double mx = ninf, s = 0; \
				for (long long i = 0; i < c; i++) mx = mr_gomax(mx, (double)row[i]); \
				for (long long i = 0; i < c; i++) s += exp((double)row[i] - mx); \
				total += mx + log(s) - (double)row[l]; \
			} \
			out[o] = (T)(total / div); \
		} \
	} \
	MR_EMU_XENT(mr_cross_entropy_##S##_##IS, T, I) \
	MR_KERNEL mr_cross_entropy_grad_##S##_##IS(T *out, const T *x, const I *lab, const T *g, long long n, long long c, \
		double div, double ninf, long long *bad) { \
		MR_GRID_LOOP(r, n) { \
			const T *row = x + r * c; \
			long long l = (long long)lab[r]; \
			if (l < 0 || l >= c) { bad[0] = 1; bad[1] = l; continue; } \
			double scale = (double)g[0] / div, mx = ninf, s = 0; \
			for (long long i = 0; i < c; i++) mx = mr_gomax(mx, (double)row[i]); \
			for (long long i = 0; i < c; i++) s += exp((double)row[i] - mx); \
			for (long long i = 0; i < c; i++) { \
				double p = exp((double)row[i] - mx) / s; \
				if (i == l) p -= 1; \
				out[r * c + i] = (T)(p * scale); \
			} \
		} \
	} \
	MR_EMU_XENT_GRAD(mr_cross_entropy_grad_##S##_##IS, T, I)

MR_GATHER(f32, float, i64, long long)
MR_GATHER(f32, float, i32, int)
MR_GATHER(f64, double, i64, long long)
MR_GATHER(f64, double, i32, int)
