package cuda

import (
	"slices"
	"sort"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// Which kernels run natively: by op, and by the dtypes of the kernel and
// its arguments.

// Native reports whether k runs as a CUDA kernel: the elementwise ops,
// matmul, transpose, const, Adam's fused ops, sum, mean, max, mse,
// softmax, log_softmax, layernorm, softmax_grad, normalize and
// normalize_grad in f32 and f64 (every argument of the kernel's dtype);
// embedding, cross_entropy and their gradients in f32 and f64 with i32 or
// i64 indices; reshape, slice and pad in any dtype. The rest falls back
// to the CPU.
func Native(k *plan.Kernel) bool {
	if k.Op == "reshape" || k.Op == "slice" || k.Op == "pad" { // data movement: any dtype
		return len(k.ArgDTypes) == 1 && k.ArgDTypes[0] == k.DType
	}
	if _, ok := gatherArgs[k.Op]; ok {
		return nativeGather(k)
	}
	if ok, decided := nativeMisc(k); decided {
		return ok
	}
	if ok, decided := nativeOther(k); decided {
		return ok
	}
	if k.Op == "matmul" && isHalf(k.DType) { // cuBLAS: half operands, f32 compute
		return len(k.ArgDTypes) == 2 && k.ArgDTypes[0] == k.DType && k.ArgDTypes[1] == k.DType
	}
	if k.DType != ir.F32 && k.DType != ir.F64 {
		return false
	}
	want := 1
	switch {
	case k.Op == "matmul" || k.Op == "mse" || slices.Contains(BinaryOps, k.Op):
		want = 2
	case k.Op == "const":
		want = 0
	case k.Op == "adam_moment" || k.Op == "adam_moment2":
		want = 3
	case k.Op == "adam_update":
		want = 7
	case k.Op == "layernorm":
		want = 3
	case k.Op == "softmax_grad" || k.Op == "normalize_grad":
		want = 2
	case !slices.Contains([]string{"transpose", "sum", "mean", "max", "softmax", "log_softmax", "normalize"}, k.Op) &&
		!slices.Contains(UnaryOps, k.Op):
		return false
	}
	if len(k.ArgDTypes) != want {
		return false
	}
	for _, dt := range k.ArgDTypes {
		if dt != k.DType {
			return false
		}
	}
	return true
}

// FallbackOps lists the ops of spec.md that have no CUDA kernel here.
func FallbackOps() []string {
	var out []string
	for _, op := range rt.CPUKernelOps() {
		if !slices.Contains(nativeOps, op) && !slices.Contains(BinaryOps, op) && !slices.Contains(UnaryOps, op) {
			out = append(out, op)
		}
	}
	sort.Strings(out)
	return out
}
