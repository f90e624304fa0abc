package rt

import (
	"fmt"
	"math"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt/vecmath"
	"github.com/meshrun/meshrun/sbp"
)

// CPU is the reference backend: the definition of every op. Kernels see a
// device's local blocks; global facts a kernel needs (the global count a
// mean divides by, the vocab offset of an embedding shard) come from the
// value's type and the blocks' offsets.
type CPU struct {
	BLAS BLAS
	// pool, when set, recycles freed buffers for collective results (one
	// rank per process only: see hostPool).
	pool *hostPool
	// arena, when set, recycles the outputs of this rank's kernels and
	// local steps: one CPU per rank, as the local launcher makes them.
	// Unlike pool it takes back only buffers it handed out and no peer
	// shares (Tensor.home), so it is safe where ranks share storage. It
	// takes no lock: only the rank's goroutine may use this CPU.
	arena *hostPool
	// call and args are Launch's argument record, reused from one
	// instruction to the next (two allocations fewer per instruction);
	// only a per-rank CPU (arena set) has one goroutine calling Launch.
	call OpCall
	args []*Tensor
	// kernels caches the kernel table's entries by plan kernel
	// (kernelFor); only a per-rank CPU has one goroutine using it
	kernels ptrTable[plan.Kernel, kernelEntry]
}

// alloc is where kernel outputs come from: a nil pool allocates.
func (c *CPU) alloc() *hostPool {
	if c.pool != nil {
		return c.pool
	}
	return c.arena
}

// OpCall is one kernel invocation.
type OpCall struct {
	Kernel *plan.Kernel
	Args   []*Tensor
	In     []sbp.Block // the arguments' blocks
	Out    sbp.Block   // the result's block
	// pool gives kernels their outputs (nil: fresh memory).
	pool *hostPool
}

// Compute runs v's kernel on local tensors. Half-precision operands are
// widened to f32 and the result rounded back once.
func (c *CPU) Compute(call *OpCall) (*Tensor, error) {
	half := false
	for _, a := range call.Args {
		half = half || isHalf(a.DType)
	}
	if !half && !isHalf(call.Kernel.DType) {
		return c.compute(call)
	}
	wide := *call
	wide.Args = make([]*Tensor, len(call.Args))
	for i, a := range call.Args {
		wide.Args[i] = widen(a)
	}
	out, err := c.compute(&wide)
	if err != nil || !isHalf(call.Kernel.DType) {
		return out, err
	}
	return narrow(out, call.Kernel.DType), nil
}

func (c *CPU) compute(call *OpCall) (*Tensor, error) {
	if k := call.Kernel; k.Op == "matmul" {
		// the one op whose fixed cost shows beside its work (a [256, 32]
		// @ [32, 32] GEMM takes a few µs): called directly, without the
		// table's hashed lookup (issue 10, goal 5); the table still lists
		// it for CPUKernelOps and any other caller
		return c.matmul(call.pool, call.Args[0], call.Args[1], k.TransA, k.TransB)
	}
	k := c.kernelFor(call.Kernel)
	if k == nil {
		return nil, fmt.Errorf("no CPU kernel for op %s", call.Kernel.Op)
	}
	return k(c, call)
}

// kernelFor is the table's kernel for k's op, nil if none. A rank's CPU
// remembers it by the plan's kernel (one per instruction, the same every
// step): hashing the op's name for the table was 3% of a Megatron MLP
// mesh step. An entry is trusted only while the kernel still names the
// op it was made for.
func (c *CPU) kernelFor(k *plan.Kernel) cpuKernel {
	if c.arena == nil { // a CPU shared between goroutines: no cache
		return cpuKernels[k.Op]
	}
	if e, ok := c.kernels.get(k); ok && e.op == k.Op {
		return e.f
	}
	if c.kernels.used >= kernelCacheMax {
		c.kernels.clear() // a CPU used with plan after plan
	}
	f := cpuKernels[k.Op]
	c.kernels.e[c.kernels.entry(k)].v = kernelEntry{op: k.Op, f: f}
	return f
}

// kernelCacheMax bounds CPU.kernels: more instructions than the largest
// shipped model's rank runs.
const kernelCacheMax = 1 << 14

// kernelEntry is what CPU.kernels keeps per plan kernel.
type kernelEntry struct {
	op string
	f  cpuKernel
}

// cpuKernel computes one op on local blocks (half-precision operands
// already widened to f32).
type cpuKernel func(c *CPU, call *OpCall) (*Tensor, error)

// cpuKernels is the CPU backend's kernel table, by op name: each kernel
// file registers its ops once (registerCPU); CPUKernelOps lists them so
// tests can check every op the compiler knows has a kernel.
var cpuKernels = map[string]cpuKernel{}

func registerCPU(k cpuKernel, ops ...string) {
	for _, op := range ops {
		if _, dup := cpuKernels[op]; dup {
			panic("rt: two CPU kernels for op " + op)
		}
		cpuKernels[op] = k
	}
}

// CPUKernelOps lists the ops the CPU backend has kernels for.
func CPUKernelOps() []string {
	out := make([]string, 0, len(cpuKernels))
	for op := range cpuKernels {
		out = append(out, op)
	}
	return out
}

// pure adapts a kernel that cannot fail.
func pure(f func(call *OpCall) *Tensor) cpuKernel {
	return func(_ *CPU, call *OpCall) (*Tensor, error) { return f(call), nil }
}

func init() {
	registerCPU(pure(func(call *OpCall) *Tensor {
		// from the rank's arena like any kernel's output: a fresh scalar
		// per const per step was 14% of the objects a tiny-GPT mesh step
		// allocated (720 a step on [dp=2, tp=2])
		t := uninitialised(call.pool, wideDType(call.Kernel.DType), nil)
		setScalar(t, call.Kernel.Attrs.Scalar)
		return t
	}), "const")
	registerCPU(pure(func(call *OpCall) *Tensor { return castTensor(call.Args[0], call.Kernel.DType) }), "cast")
	registerCPU(pure(func(call *OpCall) *Tensor {
		// the device's block of [0, p) split along the axis: its coordinate
		t := NewTensor(ir.F32, []int{1})
		setScalar(t, float64(call.Out.Off[0]))
		return t
	}), "axis_index")
	registerCPU(func(c *CPU, call *OpCall) (*Tensor, error) {
		// a padded local function's argument: the block, zeros after it
		x, err := c.Embed(call.Args[0], call.Out.Len, make([]int, len(call.Out.Len)), FillZero)
		if err != nil {
			return nil, err
		}
		return host(x)
	}, "to_local")
	registerCPU(func(c *CPU, call *OpCall) (*Tensor, error) {
		// a padded local function's result: the block without its padding
		x, err := c.Slice(call.Args[0], make([]int, len(call.Out.Len)), call.Out.Len)
		if err != nil {
			return nil, err
		}
		return host(x)
	}, "from_local")
	registerCPU(pure(func(call *OpCall) *Tensor {
		t := NewTensor(ir.F32, call.Kernel.Shape)
		for i := range t.Data.([]float32) {
			t.Data.([]float32)[i] = float32(i)
		}
		return t
	}), "arange")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return where(call.Args[0], call.Args[1], call.Args[2])
	}, "where")
	registerCPU(pure(func(call *OpCall) *Tensor {
		out := NewTensor(call.Args[0].DType, nil)
		for _, x := range call.Args[0].Float64s() {
			if math.IsInf(x, 0) || math.IsNaN(x) {
				setScalar(out, 1)
				break
			}
		}
		return out
	}), "nonfinite")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return elementwise(call.pool, call.Kernel.Op, call.Args[0], call.Args[1])
	}, "add", "sub", "mul", "div", "minimum", "maximum")
	registerCPU(pure(func(call *OpCall) *Tensor { return unary(call.pool, call.Kernel.Op, call.Args[0]) }),
		"neg", "exp", "log", "sqrt", "tanh", "relu", "gelu", "sigmoid")
	registerCPU(func(c *CPU, call *OpCall) (*Tensor, error) {
		k := call.Kernel
		return c.matmul(call.pool, call.Args[0], call.Args[1], k.TransA, k.TransB)
	}, "matmul")
	registerCPU(pure(func(call *OpCall) *Tensor {
		return softmax(call.pool, call.Args[0], call.Kernel.Attrs.Axis, call.Kernel.Op == "log_softmax")
	}), "softmax", "log_softmax")
	registerCPU(pure(func(call *OpCall) *Tensor {
		a := call.Args
		return layernorm(call.pool, a[0], a[1], a[2], call.Kernel.Attrs.Eps)
	}), "layernorm")
	registerCPU(pure(func(call *OpCall) *Tensor { return reduce(call.pool, call.Kernel, call.Args[0]) }), "sum", "mean", "max")
	registerCPU(pure(func(call *OpCall) *Tensor { return transpose(call.pool, call.Args[0], call.Kernel.Attrs.Perm) }), "transpose")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		a := call.Args
		if a[0].Numel() != numel(call.Out.Len) {
			return nil, fmt.Errorf("reshape: local block of %d elements cannot become %s", a[0].Numel(), ir.ShapeString(call.Out.Len))
		}
		// a copy, not a view: every slot owns its storage, so the memory
		// accounting counts what is really held; made in the result's
		// shape, so last step's result comes back whole from the arena
		t := uninitialised(call.pool, a[0].DType, call.Out.Len)
		copyData(t, a[0])
		return t, nil
	}, "reshape")
	registerCPU(pure(func(call *OpCall) *Tensor { return concatDim(call.pool, call.Args, call.Kernel.Attrs.Axis) }), "concat")
	registerCPU(pure(func(call *OpCall) *Tensor {
		x, at := call.Args[0], call.Kernel.Attrs
		off := make([]int, len(x.Shape))
		off[at.Axis] = at.Start
		var dims [8]int // on the stack: extract's result copies its shape
		count := append(dims[:0], x.Shape...)
		count[at.Axis] = at.End - at.Start
		return extract(call.pool, x, off, count)
	}), "slice")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return embedding(call.pool, call.Args[0], call.Args[1], call.In[0].Off[0], call.Kernel.ArgShapes[0][0])
	}, "embedding")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return crossEntropy(call.pool, call.Args[0], call.Args[1], call.Kernel.ArgShapes[0][0])
	}, "cross_entropy")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return mse(call.pool, call.Args[0], call.Args[1], numel(call.Kernel.ArgShapes[0]))
	}, "mse")
}

// where picks a where cond is non-zero, else b, with broadcasting.
func where(cond, a, b *Tensor) (*Tensor, error) {
	shape, ok := ops.Broadcast(a.Shape, b.Shape)
	if ok {
		shape, ok = ops.Broadcast(shape, cond.Shape)
	}
	if !ok {
		return nil, fmt.Errorf("local shapes %s, %s and %s do not broadcast", ir.ShapeString(cond.Shape), ir.ShapeString(a.Shape), ir.ShapeString(b.Shape))
	}
	cv := broadcastTo(cond, shape).Float64s()
	av, bv := broadcastTo(a, shape).Float64s(), broadcastTo(b, shape).Float64s()
	for i := range av {
		if cv[i] == 0 {
			av[i] = bv[i]
		}
	}
	out := NewTensor(a.DType, shape)
	storeFloat64s(out, av)
	return out, nil
}

// wideDType is the dtype a kernel computes a value in: f32 for half types.
func wideDType(dt ir.DType) ir.DType {
	if isHalf(dt) {
		return ir.F32
	}
	return dt
}

// castTensor converts between float dtypes (half results are rounded by
// Compute's narrowing).
func castTensor(x *Tensor, dt ir.DType) *Tensor {
	out := NewTensor(wideDType(dt), x.Shape)
	storeFloat64s(out, x.Float64s())
	return out
}

func setScalar(t *Tensor, f float64) {
	switch d := t.Data.(type) {
	case []float32:
		d[0] = float32(f)
	case []float64:
		d[0] = f
	case []int32:
		d[0] = int32(f)
	case []int64:
		d[0] = int64(f)
	case []uint16: // bf16 or f16, rounded once from f32
		if t.DType == ir.F16 {
			d[0] = F32ToF16(float32(f))
		} else {
			d[0] = F32ToBF16(float32(f))
		}
	}
}

// floatsOf dispatches a float kernel on a tensor's element type.
func floatsOf[R any](t *Tensor, f32 func([]float32) R, f64 func([]float64) R) R {
	if d, ok := t.Data.([]float32); ok {
		return f32(d)
	}
	return f64(t.Data.([]float64))
}

func elementwise(p *hostPool, op string, x, y *Tensor) (*Tensor, error) {
	var dims [8]int // the shape stays on the stack: uninitialised copies it
	shape, ok := x.Shape, true
	if !sameShape(x.Shape, y.Shape) { // (most operands: nothing to broadcast)
		shape, ok = ops.BroadcastAppend(dims[:0], x.Shape, y.Shape)
	}
	if !ok {
		return nil, fmt.Errorf("local shapes %s and %s do not broadcast", ir.ShapeString(x.Shape), ir.ShapeString(y.Shape))
	}
	count := 1 // (numel's error path would move dims to the heap)
	for _, d := range shape {
		count *= d // the plan's shape check bounds every result's size (ir.Type): no overflow
	}
	out := uninitialisedN(p, x.DType, shape, count)
	shape = out.Shape // (the kernel's closures would move dims too)
	switch d := out.Data.(type) {
	case []float32:
		binaryKernel(op, d, shape, x.Data.([]float32), x.Shape, y.Data.([]float32), y.Shape)
	case []float64:
		binaryKernel(op, d, shape, x.Data.([]float64), x.Shape, y.Data.([]float64), y.Shape)
	}
	return out, nil
}

// isSuffix says whether shape s, leading 1s dropped, is the trailing dims
// of full: s then repeats contiguously along full's other dims.
func isSuffix(s, full []int) bool {
	for len(s) > 0 && s[0] == 1 {
		s = s[1:]
	}
	if len(s) > len(full) {
		return false
	}
	return sameShape(s, full[len(full)-len(s):])
}

func binaryFn[T Float](op string) func(a, b T) T {
	switch op {
	case "add":
		return func(a, b T) T { return a + b }
	case "sub":
		return func(a, b T) T { return a - b }
	case "mul":
		return func(a, b T) T { return a * b }
	case "minimum":
		return func(a, b T) T { return min(a, b) }
	case "maximum":
		return func(a, b T) T { return max(a, b) }
	}
	return func(a, b T) T { return a / b }
}

// scalarBinary is binaryFn(op)(a, b) without the function value.
func scalarBinary[T Float](op string, a, b T) T {
	switch op {
	case "add":
		return a + b
	case "sub":
		return a - b
	case "mul":
		return a * b
	case "minimum":
		return min(a, b)
	case "maximum":
		return max(a, b)
	}
	return a / b
}

// broadcastStrides gives the strides of an operand viewed with the output's
// shape: 0 along broadcast dims.
func broadcastStrides(in, out []int) []int {
	st := strides(in)
	bs := make([]int, len(out))
	for i := range out {
		j := i - (len(out) - len(in))
		if j >= 0 && in[j] != 1 {
			bs[i] = st[j]
		}
	}
	return bs
}

func binaryKernel[T Float](op string, out []T, shape []int, x []T, xs []int, y []T, ys []int) {
	n := len(out)
	if n == 0 {
		return
	}
	if n == 1 && len(x) == 1 && len(y) == 1 {
		// scalars (a learning rate, a norm, a clip factor) need none of
		// the broadcasting below: minimum and maximum made a closure
		// there (binaryFn), and every op sized its strides
		out[0] = scalarBinary(op, x[0], y[0])
		return
	}
	// the common shapes get loops with the arithmetic inline
	fast := func(xScalar, yScalar bool) bool { return binaryFast(op, out, x, y, xScalar, yScalar) }
	switch {
	case sameShape(xs, ys):
		if fast(false, false) {
			return
		}
	case len(y) == 1 && sameShape(xs, shape):
		if fast(false, true) {
			return
		}
	case len(x) == 1 && sameShape(ys, shape):
		if fast(true, false) {
			return
		}
	case sameShape(xs, shape) && len(y) > 0 && isSuffix(ys, shape):
		// y repeats along x's leading dims (a bias, a mask, positions):
		// the same-shape loop once per repetition
		if fastBinary(op, out[:len(y)], x[:len(y)], y, false, false) {
			for o := len(y); o < n; o += len(y) {
				fastBinary(op, out[o:o+len(y)], x[o:o+len(y)], y, false, false)
			}
			return
		}
	case sameShape(ys, shape) && len(x) > 0 && isSuffix(xs, shape):
		if fastBinary(op, out[:len(x)], x, y[:len(x)], false, false) {
			for o := len(x); o < n; o += len(x) {
				fastBinary(op, out[o:o+len(x)], x, y[o:o+len(x)], false, false)
			}
			return
		}
	}
	f := binaryFn[T](op)
	r := len(shape)
	xst, yst := broadcastStrides(xs, shape), broadcastStrides(ys, shape)
	idx := make([]int, r)
	xi, yi := 0, 0
	for i := 0; i < n; i++ {
		out[i] = f(x[xi], y[yi])
		for k := r - 1; k >= 0; k-- {
			idx[k]++
			xi += xst[k]
			yi += yst[k]
			if idx[k] < shape[k] {
				break
			}
			xi -= xst[k] * idx[k]
			yi -= yst[k] * idx[k]
			idx[k] = 0
		}
	}
}

// binaryFast runs add, sub, mul and div over out with the arithmetic
// inline (fastBinary), in parallel chunks when out is large; x and y are
// out's length or scalars. It reports false for other ops. A function of
// its own rather than a closure of binaryKernel's: the closure, called
// through its captured variables, was 8% of a 4-element add's launch in
// a profile (BenchmarkInstrCost).
func binaryFast[T Float](op string, out, x, y []T, xScalar, yScalar bool) bool {
	switch op {
	case "add", "sub", "mul", "div":
	default:
		return false
	}
	if len(out) <= parallelGrain {
		// one call, without the closure below: a closure handed to
		// parallelFor escapes (its goroutines run it), so making one
		// allocates, and nearly every loop of a mesh step is this small
		// (a sixth of the bytes a Megatron MLP step allocated on [dp=1,
		// tp=2])
		fastBinary(op, out, x, y, xScalar, yScalar)
		return true
	}
	parallelFor(len(out), func(lo, hi int) {
		xs, ys := x, y
		if !xScalar {
			xs = x[lo:hi]
		}
		if !yScalar {
			ys = y[lo:hi]
		}
		fastBinary(op, out[lo:hi], xs, ys, xScalar, yScalar)
	})
	return true
}

// binaryOpByte names vecmath.Binary's ops (0: none of them).
func binaryOpByte(op string) byte {
	switch op {
	case "add":
		return '+'
	case "sub":
		return '-'
	case "mul":
		return '*'
	case "div":
		return '/'
	}
	return 0
}

// fastBinary runs add, sub, mul and div with one operand possibly a
// scalar, the arithmetic inline (no call per element). It reports false
// for other ops.
//
// Each operand read per element is first cut to len(out): the compiler
// then drops the bounds checks from the loops (about half their time).
func fastBinary[T Float](op string, out, x, y []T, xScalar, yScalar bool) bool {
	if o, ok := any(out).([]float32); ok { // eight lanes at a time (rt/vecmath), the same bits
		return vecmath.Binary(binaryOpByte(op), o, any(x).([]float32), any(y).([]float32), xScalar, yScalar)
	}
	switch {
	case !xScalar && !yScalar:
		x, y = x[:len(out)], y[:len(out)]
		switch op {
		case "add":
			for i := range out {
				out[i] = x[i] + y[i]
			}
		case "sub":
			for i := range out {
				out[i] = x[i] - y[i]
			}
		case "mul":
			for i := range out {
				out[i] = x[i] * y[i]
			}
		case "div":
			for i := range out {
				out[i] = x[i] / y[i]
			}
		default:
			return false
		}
	case yScalar:
		s := y[0]
		x = x[:len(out)]
		switch op {
		case "add":
			for i := range out {
				out[i] = x[i] + s
			}
		case "sub":
			for i := range out {
				out[i] = x[i] - s
			}
		case "mul":
			for i := range out {
				out[i] = x[i] * s
			}
		case "div":
			for i := range out {
				out[i] = x[i] / s
			}
		default:
			return false
		}
	default:
		s := x[0]
		y = y[:len(out)]
		switch op {
		case "add":
			for i := range out {
				out[i] = s + y[i]
			}
		case "sub":
			for i := range out {
				out[i] = s - y[i]
			}
		case "mul":
			for i := range out {
				out[i] = s * y[i]
			}
		case "div":
			for i := range out {
				out[i] = s / y[i]
			}
		default:
			return false
		}
	}
	return true
}

// GELU is the exact form PyTorch uses by default: x·Φ(x) = ½x(1 + erf(x/√2)).
func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func unaryFn(op string) func(float64) float64 {
	switch op {
	case "neg":
		return func(x float64) float64 { return -x }
	case "exp":
		return math.Exp
	case "log":
		return math.Log
	case "sqrt":
		return math.Sqrt
	case "tanh":
		return math.Tanh
	case "relu":
		return func(x float64) float64 { return math.Max(x, 0) }
	case "gelu":
		return gelu
	}
	return func(x float64) float64 { return 1 / (1 + math.Exp(-x)) } // sigmoid
}

func unary(p *hostPool, op string, x *Tensor) *Tensor {
	out := uninitialised(p, x.DType, x.Shape)
	f := unaryFn(op)
	switch d := out.Data.(type) {
	case []float32:
		in := x.Data.([]float32)
		switch op { // the cheap ones inline; the rest through float64 math
		case "neg":
			for i, v := range in {
				d[i] = -v
			}
		case "relu":
			for i, v := range in {
				d[i] = max(v, 0)
			}
		case "sqrt":
			for i, v := range in {
				d[i] = float32(math.Sqrt(float64(v)))
			}
		case "gelu": // f32 arithmetic, eight lanes at a time (rt/vecmath)
			parallelSlices(d, in, vecmath.Gelu)
		case "exp", "tanh", "sigmoid": // f32-accurate kernels (f32math.go)
			g := sigmoid32
			switch op {
			case "exp":
				g = exp32
			case "tanh":
				g = tanh32
			}
			parallelWith(len(in), mapArgs[float32]{d, in, g}, func(a mapArgs[float32], lo, hi int) {
				for i := lo; i < hi; i++ {
					a.d[i] = a.f(a.in[i])
				}
			})
		default:
			parallelWith(len(in), mapArgs[float64]{d, in, f}, func(a mapArgs[float64], lo, hi int) {
				for i := lo; i < hi; i++ {
					a.d[i] = float32(a.f(float64(a.in[i])))
				}
			})
		}
	case []float64:
		for i, v := range x.Data.([]float64) {
			d[i] = f(v)
		}
	}
	return out
}

// mapArgs is what unary's f32 loops read: out, in, and the function of
// each element (in f32 or through float64).
type mapArgs[T Float] struct {
	d, in []float32
	f     func(T) T
}

// uninitialised is zeroed without the zeroing, for a kernel that writes
// every element of its output: a recycled buffer keeps its old contents.
func uninitialised(p *hostPool, dt ir.DType, shape []int) *Tensor {
	return uninitialisedN(p, dt, shape, numel(shape))
}

// uninitialisedN is uninitialised for a shape of count elements that the
// caller counted: it keeps only copies of shape, so a shape on the
// caller's stack stays there (numel's error path would move it to the
// heap: an allocation per matmul).
//
// Like zeroed and get it takes back a freed tensor whole when its shape is
// shape (the same instruction's output, a step later), header included,
// and otherwise its storage under a new header.
func uninitialisedN(p *hostPool, dt ir.DType, shape []int, count int) *Tensor {
	if p == nil {
		return NewTensor(dt, slices.Clone(shape))
	}
	t := p.reuseN(dt, shape, count)
	if t == nil {
		return p.zeroed(dt, slices.Clone(shape))
	}
	t.home = p
	p.handOut(int64(count * dt.Size())) // count, not t.Bytes(): no walk of the shape
	return t
}

// NewRankCPU is the CPU backend as the local launcher makes it for one
// rank: kernel outputs drawn from, and freed buffers returned to, the
// rank's own arena (for benchmarks that time an op as the runtime runs it).
func NewRankCPU(b BLAS) *CPU { return &CPU{BLAS: b, arena: newArena(0)} }
