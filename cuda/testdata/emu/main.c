/* The emulator's driver: runs one kernel of elementwise.cu on arrays read
 * from files and writes the result. ops.h (written by the test) lists the
 * ops as X-macros, so an op the Go side lists without a kernel fails to link.
 *
 *   emu OP f32|f64 GRID BLOCK N IN OUT                    (unary)
 *   emu OP f32|f64 GRID BLOCK N A B OUT NDIM SHAPE.. SA.. SB..   (binary)
 *
 * The output buffer has GUARD elements on each side, filled with a
 * sentinel; a kernel that writes outside [0, N) makes the driver fail, and
 * an element the kernel never writes keeps the sentinel (which the test
 * sees as a mismatch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu.h"
#include "elementwise.cu"
#include "ops.h"

mr_dim3 blockIdx, threadIdx, blockDim, gridDim;

#define GUARD 64
#define SENTINEL 0x5A

static void *slurp(const char *path, size_t bytes) {
	void *p = malloc(bytes ? bytes : 1);
	FILE *f = fopen(path, "rb");
	if (!f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "emu: cannot read %zu bytes of %s\n", bytes, path); exit(2); }
	fclose(f);
	return p;
}

typedef void (*unary_f32)(float *, const float *, long long);
typedef void (*unary_f64)(double *, const double *, long long);
typedef void (*binary_f32)(float *, const float *, const float *, long long, mr_bcast);
typedef void (*binary_f64)(double *, const double *, const double *, long long, mr_bcast);

#define X(op) {#op, (void *)mr_##op##_f32, (void *)mr_##op##_f64},
static const struct { const char *name; void *f32, *f64; } unary[] = {UNARY_OPS}, binary[] = {BINARY_OPS};
#undef X

static int find(const char *op, int isbin, int f64, void **fn) {
	size_t n = isbin ? sizeof binary / sizeof binary[0] : sizeof unary / sizeof unary[0];
	for (size_t i = 0; i < n; i++) {
		const char *name = isbin ? binary[i].name : unary[i].name;
		if (strcmp(name, op) == 0) {
			*fn = isbin ? (f64 ? binary[i].f64 : binary[i].f32) : (f64 ? unary[i].f64 : unary[i].f32);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv) {
	if (argc < 8) { fprintf(stderr, "emu: usage\n"); return 2; }
	const char *op = argv[1];
	int f64 = strcmp(argv[2], "f64") == 0;
	size_t es = f64 ? 8 : 4;
	unsigned grid = (unsigned)atoi(argv[3]), block = (unsigned)atoi(argv[4]);
	long long n = atoll(argv[5]);
	void *fn;
	int isbin = find(op, 1, f64, &fn);
	if (!isbin && !find(op, 0, f64, &fn)) { fprintf(stderr, "emu: no kernel %s\n", op); return 2; }

	unsigned char *buf = (unsigned char *)malloc((n + 2 * GUARD) * es);
	memset(buf, SENTINEL, (n + 2 * GUARD) * es);
	void *out = buf + GUARD * es;
	const char *outPath;
	if (!isbin) {
		void *x = slurp(argv[6], n * es);
		outPath = argv[7];
		if (f64) EMU_LAUNCH(grid, block, ((unary_f64)fn)((double *)out, (const double *)x, n));
		else EMU_LAUNCH(grid, block, ((unary_f32)fn)((float *)out, (const float *)x, n));
		free(x);
	} else {
		mr_bcast bc;
		memset(&bc, 0, sizeof bc);
		bc.ndim = atoll(argv[9]);
		if (argc != 10 + 3 * bc.ndim || bc.ndim > MR_MAX_DIMS) { fprintf(stderr, "emu: bad broadcast\n"); return 2; }
		long long na = 1, nb = 1; /* elements each operand spans */
		for (int d = 0; d < bc.ndim; d++) {
			bc.shape[d] = atoll(argv[10 + d]);
			bc.a[d] = atoll(argv[10 + bc.ndim + d]);
			bc.b[d] = atoll(argv[10 + 2 * bc.ndim + d]);
			na += (bc.shape[d] - 1) * bc.a[d];
			nb += (bc.shape[d] - 1) * bc.b[d];
		}
		void *a = slurp(argv[6], na * es), *b = slurp(argv[7], nb * es);
		outPath = argv[8];
		if (f64) EMU_LAUNCH(grid, block, ((binary_f64)fn)((double *)out, (const double *)a, (const double *)b, n, bc));
		else EMU_LAUNCH(grid, block, ((binary_f32)fn)((float *)out, (const float *)a, (const float *)b, n, bc));
		free(a);
		free(b);
	}
	for (size_t i = 0; i < GUARD * es; i++) {
		if (buf[i] != SENTINEL || buf[(GUARD + n) * es + i] != SENTINEL) {
			fprintf(stderr, "emu: %s wrote outside its output\n", op);
			return 3;
		}
	}
	FILE *f = fopen(outPath, "wb");
	if (!f || fwrite(out, es, n, f) != (size_t)n) { fprintf(stderr, "emu: cannot write %s\n", outPath); return 2; }
	fclose(f);
	free(buf);
	return 0;
}
