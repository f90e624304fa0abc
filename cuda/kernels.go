package cuda

import (
	_ "embed" // the kernel source
	"fmt"

	"github.com/meshrun/meshrun/ir"
)

// ElementwiseSource is the CUDA C of the elementwise kernels, for NVRTC
// (Open compiles it with MemorySource; never yet on a GPU).
// elementwise_test.go compiles it with the C compiler and checks it
// against the CPU backend.
//
//go:embed elementwise.cu
var ElementwiseSource string

// BinaryOps broadcast like NumPy; UnaryOps map same-shaped tensors. Each
// has a kernel per dtype in ElementwiseSource.
var (
	BinaryOps = []string{"add", "sub", "mul", "div", "minimum", "maximum"}
	UnaryOps  = []string{"neg", "exp", "log", "sqrt", "tanh", "relu", "relu_grad", "sigmoid", "gelu", "gelu_grad"}
)

// MaxDims is the most dims a broadcast binary kernel takes (MR_MAX_DIMS).
const MaxDims = 8

// KernelName is the entry point of op for dtype: mr_<op>_<f32|f64>.
func KernelName(op string, dt ir.DType) (string, error) {
	switch dt {
	case ir.F32:
		return "mr_" + op + "_f32", nil
	case ir.F64:
		return "mr_" + op + "_f64", nil
	}
	return "", fmt.Errorf("cuda: no %s kernel for %s (f32 and f64 only)", op, dt)
}

// Broadcast is mr_bcast, the by-value argument of the binary kernels:
// int64 fields throughout, so Go's and C's layouts agree.
type Broadcast struct {
	NDim  int64
	Shape [MaxDims]int64
	A, B  [MaxDims]int64
}

// BroadcastFor gives the output shape of a NumPy broadcast of shapes a
// and b and each operand's strides over it (row-major, 0 along the dims
// it is broadcast). Size-1 output dims are dropped and neighbouring dims
// that both operands walk contiguously are merged, so the kernel's index
// arithmetic does as few divisions as the shapes allow.
func BroadcastFor(a, b []int) (Broadcast, []int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	sa, sb := make([]int64, n), make([]int64, n)
	stA, stB := int64(1), int64(1)
	for i := n - 1; i >= 0; i-- {
		da, db := dimAt(a, i-n+len(a)), dimAt(b, i-n+len(b))
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return Broadcast{}, nil, fmt.Errorf("cuda: shapes %v and %v do not broadcast", a, b)
		}
		if da != 1 {
			sa[i] = stA
		}
		if db != 1 {
			sb[i] = stB
		}
		stA *= int64(da)
		stB *= int64(db)
	}
	var bc Broadcast
	for i := 0; i < n; i++ {
		if out[i] == 1 {
			continue
		}
		k := bc.NDim - 1
		// Merge dim i into the previous kept dim when, for both operands,
		// stepping the previous dim equals stepping all of dim i.
		if k >= 0 && bc.A[k] == sa[i]*int64(out[i]) && bc.B[k] == sb[i]*int64(out[i]) {
			bc.Shape[k] *= int64(out[i])
			bc.A[k], bc.B[k] = sa[i], sb[i]
			continue
		}
		if bc.NDim == MaxDims {
			return Broadcast{}, nil, fmt.Errorf("cuda: broadcast of %v and %v needs more than %d dims", a, b, MaxDims)
		}
		bc.Shape[bc.NDim], bc.A[bc.NDim], bc.B[bc.NDim] = int64(out[i]), sa[i], sb[i]
		bc.NDim++
	}
	return bc, out, nil
}

func dimAt(shape []int, i int) int {
	if i < 0 {
		return 1
	}
	return shape[i]
}

// LaunchDims is the grid and block for n elements: 256 threads a block,
// and at most 65536 blocks (the grid-stride loop covers the rest).
func LaunchDims(n int) (grid, block int) {
	block = 256
	grid = min(max((n+block-1)/block, 1), 1<<16)
	return grid, block
}
