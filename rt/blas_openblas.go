//go:build cgo && linux

package rt

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*, int);
typedef void (*threads_fn)(int);

static void *ob_handle;
static sgemm_fn ob_sgemm;
static dgemm_fn ob_dgemm;

static int ob_load(const char *name) {
	ob_handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!ob_handle) return 1;
	ob_sgemm = (sgemm_fn)dlsym(ob_handle, "cblas_sgemm");
	ob_dgemm = (dgemm_fn)dlsym(ob_handle, "cblas_dgemm");
	if (!ob_sgemm || !ob_dgemm) return 2;
	return 0;
}

// CblasRowMajor = 101, CblasNoTrans = 111.
static void ob_s(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
	ob_sgemm(101, 111, 111, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
static void ob_d(int m, int n, int k, const double *a, int lda, const double *b, int ldb, double *c, int ldc) {
	ob_dgemm(101, 111, 111, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// OpenBLAS calls cblas_sgemm/cblas_dgemm from libopenblas.so.0, opened with
// dlopen at run time: nothing about it is needed to build.
type OpenBLAS struct{}

var (
	obOnce sync.Once
	obErr  error
)

// LoadOpenBLAS opens libopenblas.so.0. MESHRUN_BLAS=gonum disables it.
func LoadOpenBLAS() (BLAS, error) {
	if os.Getenv("MESHRUN_BLAS") == "gonum" {
		return nil, fmt.Errorf("OpenBLAS disabled by MESHRUN_BLAS=gonum")
	}
	obOnce.Do(func() {
		name := C.CString("libopenblas.so.0")
		defer C.free(unsafe.Pointer(name))
		switch C.ob_load(name) {
		case 1:
			obErr = fmt.Errorf("libopenblas.so.0 not found")
		case 2:
			obErr = fmt.Errorf("libopenblas.so.0 has no cblas_sgemm/cblas_dgemm")
		}
	})
	if obErr != nil {
		return nil, obErr
	}
	return OpenBLAS{}, nil
}

func (OpenBLAS) Name() string { return "openblas" }

func (OpenBLAS) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	C.ob_s(C.int(m), C.int(n), C.int(k), (*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), (*C.float)(&c[0]), C.int(ldc))
}

func (OpenBLAS) Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	C.ob_d(C.int(m), C.int(n), C.int(k), (*C.double)(&a[0]), C.int(lda), (*C.double)(&b[0]), C.int(ldb), (*C.double)(&c[0]), C.int(ldc))
}
