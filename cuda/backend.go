package cuda

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// Buf is a tensor in device memory. It is an rt.HostReader: the host-side
// collectives read it through a copy.
type Buf struct {
	dt    ir.DType
	shape []int
	ptr   uint64
	bytes int64
	dev   *Device
}

func (b *Buf) Elem() ir.DType { return b.dt }
func (b *Buf) Dims() []int    { return b.shape }
func (b *Buf) Bytes() int64   { return b.bytes }

// ReadHost copies the buffer into a new host tensor.
func (b *Buf) ReadHost() (*rt.Tensor, error) {
	t := rt.NewTensor(b.dt, b.shape)
	if err := b.dev.toHost(hostPtr(t), b.ptr, b.bytes); err != nil {
		return nil, err
	}
	return t, nil
}

// hostPtr is the first byte of a host tensor's storage (nil when empty).
func hostPtr(t *rt.Tensor) unsafe.Pointer {
	switch d := t.Data.(type) {
	case []float32:
		return unsafe.Pointer(unsafe.SliceData(d))
	case []float64:
		return unsafe.Pointer(unsafe.SliceData(d))
	case []int32:
		return unsafe.Pointer(unsafe.SliceData(d))
	case []int64:
		return unsafe.Pointer(unsafe.SliceData(d))
	case []uint16:
		return unsafe.Pointer(unsafe.SliceData(d))
	}
	return nil
}

// Backend is rt.Backend on one GPU. Every rank of a local run may share
// it (several logical devices on one GPU): its methods are safe for
// concurrent use. Ops with a CUDA kernel here (Native) run on the GPU;
// every other op falls back to the CPU backend's kernel on host copies
// of its arguments, its result copied back, and says so once per op and
// dtype on the notify writer.
type Backend struct {
	dev    *Device
	cpu    *rt.CPU
	notify io.Writer

	mu        sync.Mutex
	fallbacks map[string]int // "op dtype" → launches that fell back
}

// NewBackend opens GPU ordinal; fallback notices go to notify (nil: none).
func NewBackend(ordinal int, notify io.Writer) (*Backend, error) {
	d, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	if notify != nil && !strings.HasSuffix(d.Code, " CUBIN") {
		major, minor, _ := NVRTCVersion()
		fmt.Fprintf(notify, "meshrun: NVRTC %d.%d does not know %s: its kernels are %s (a newer CUDA's NVRTC compiles for it directly)\n",
			major, minor, d.Arch, d.Code)
	}
	return &Backend{dev: d, cpu: &rt.CPU{BLAS: rt.DefaultBLAS()}, notify: notify, fallbacks: map[string]int{}}, nil
}

// Device is the GPU the backend runs on.
func (be *Backend) Device() *Device { return be.dev }

// Close releases the device's memory, kernels and stream.
func (be *Backend) Close() error { return be.dev.Close() }

// Fallbacks lists the ops (with dtype) that ran on the CPU, and how often.
func (be *Backend) Fallbacks() map[string]int {
	be.mu.Lock()
	defer be.mu.Unlock()
	out := make(map[string]int, len(be.fallbacks))
	for k, v := range be.fallbacks {
		out[k] = v
	}
	return out
}

// Name implements rt.Backend.
func (be *Backend) Name() string {
	if be.dev.tf32.Load() {
		return fmt.Sprintf("cuda (%s, %s, TF32 matmuls)", be.dev.Name, be.dev.Arch)
	}
	return fmt.Sprintf("cuda (%s, %s)", be.dev.Name, be.dev.Arch)
}

// SetTF32 turns TF32 matmuls on or off: f32 GEMMs on the tensor cores with
// each operand rounded to TF32 (10 mantissa bits, f16's precision) and
// f32 sums, as PyTorch's torch.backends.cuda.matmul.allow_tf32. Off by
// default, so that f32 means f32, as on the CPU backend; on, a matmul's
// result differs from the CPU's by TF32's rounding (check --tf32 compares
// at that resolution).
func (be *Backend) SetTF32(on bool) { be.dev.tf32.Store(on) }

// newBuf allocates an uninitialised device buffer.
func (be *Backend) newBuf(dt ir.DType, shape []int) (*Buf, error) {
	n := int64(dt.Size())
	for _, s := range shape {
		n *= int64(s)
	}
	p, err := be.dev.alloc(n)
	if err != nil {
		return nil, err
	}
	return &Buf{dt: dt, shape: slices.Clone(shape), ptr: p, bytes: n, dev: be.dev}, nil
}

// Alloc implements rt.Backend.
func (be *Backend) Alloc(dt ir.DType, shape []int) (rt.Buffer, error) {
	b, err := be.newBuf(dt, shape)
	if err != nil {
		return nil, err
	}
	if err := be.dev.zero(b.ptr, b.bytes); err != nil {
		be.Free(b)
		return nil, err
	}
	return b, nil
}

// Free implements rt.Backend; host tensors (collectives' results) are
// left to Go's collector. The buffer keeps its size (accounting may read
// it) but loses its pointer, so a second Free does nothing.
func (be *Backend) Free(b rt.Buffer) {
	if d, ok := b.(*Buf); ok && d.dev == be.dev && d.ptr != 0 {
		be.dev.release(d.ptr, d.bytes)
		d.ptr = 0
	}
}

// CopyIn implements rt.Backend.
func (be *Backend) CopyIn(t *rt.Tensor) (rt.Buffer, error) { return buffer(be.upload(t)) }

// buffer hands a *Buf on as an rt.Buffer, and nothing with an error: a
// nil *Buf inside an rt.Buffer is not a nil interface, and a caller that
// checks the buffer instead of the error would take it for a result.
func buffer(b *Buf, err error) (rt.Buffer, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (be *Backend) upload(t *rt.Tensor) (*Buf, error) {
	b, err := be.newBuf(t.DType, t.Shape)
	if err != nil {
		return nil, err
	}
	if err := be.dev.toDevice(b.ptr, hostPtr(t), b.bytes); err != nil {
		be.Free(b)
		return nil, err
	}
	return b, nil
}

// CopyOut implements rt.Backend.
func (be *Backend) CopyOut(b rt.Buffer) (*rt.Tensor, error) {
	switch x := b.(type) {
	case *rt.Tensor:
		return x, nil
	case *Buf:
		return x.ReadHost()
	}
	return nil, fmt.Errorf("cuda: a %T is not a buffer of this backend", b)
}

// Sync implements rt.Backend.
func (be *Backend) Sync(context.Context) error { return be.dev.Sync() }

// onDevice returns args as device buffers: host tensors (what collectives
// and receives return) are uploaded into temporaries, released by done.
func (be *Backend) onDevice(args []rt.Buffer) (bufs []*Buf, done func(), err error) {
	var temps []*Buf
	done = func() {
		for _, t := range temps {
			be.Free(t)
		}
	}
	for _, a := range args {
		if x, ok := a.(*Buf); ok && x.dev != be.dev {
			// another GPU's (ranks on several GPUs): through the host
			t, err := x.ReadHost()
			if err != nil {
				done()
				return nil, nil, err
			}
			a = t
		}
		switch x := a.(type) {
		case *Buf:
			bufs = append(bufs, x)
		case *rt.Tensor:
			t, err := be.upload(x)
			if err != nil {
				done()
				return nil, nil, err
			}
			temps = append(temps, t)
			bufs = append(bufs, t)
		default:
			done()
			return nil, nil, fmt.Errorf("cuda: a %T is not a buffer of this backend", a)
		}
	}
	return bufs, done, nil
}

// Launch implements rt.Backend.
func (be *Backend) Launch(ctx context.Context, k *plan.Kernel, args []rt.Buffer, in []sbp.Block, out sbp.Block) (rt.Buffer, error) {
	if !Native(k) {
		if kw, ok := widened(k); ok {
			return be.launchHalf(ctx, k, kw, args, in, out)
		}
		return be.fallback(k, args, in, out)
	}
	bufs, done, err := be.onDevice(args)
	if err != nil {
		return nil, err
	}
	defer done() // stream order: released buffers are reused only after this launch
	if len(bufs) != len(k.ArgDTypes) {
		return nil, fmt.Errorf("cuda: %s of %s: %d arguments, the plan says %d", k.Op, k.DType, len(bufs), len(k.ArgDTypes))
	}
	for i, b := range bufs {
		if b.dt != k.ArgDTypes[i] {
			return nil, fmt.Errorf("cuda: %s of %s: argument %d is %s, not as the plan says (%v)", k.Op, k.DType, i, b.dt, k.ArgDTypes)
		}
	}
	if r, ok, err := be.launchData(k, bufs, in, out); ok {
		return r, err
	}
	return be.launchModel(k, bufs, in, out)
}

// launchData runs the data-movement, elementwise and GEMM ops; ok is
// false for the others.
func (be *Backend) launchData(k *plan.Kernel, bufs []*Buf, in []sbp.Block, out sbp.Block) (r rt.Buffer, ok bool, err error) {
	ok = true
	switch {
	case k.Op == "concat":
		r, err = be.concat(k, bufs)
	case k.Op == "to_local":
		r, err = be.toLocal(bufs[0], out)
	case k.Op == "from_local":
		r, err = be.fromLocal(bufs[0], out)
	case k.Op == "broadcast_to":
		r, err = be.broadcastTo(bufs[0], out.Len)
	case k.Op == "arange":
		r, err = be.arange(k.Shape)
	case k.Op == "axis_index":
		r, err = be.axisIndex(out)
	case k.Op == "cast":
		r, err = be.cast(k, bufs[0])
	case k.Op == "matmul":
		r, err = be.matmulFused(k, bufs[0], bufs[1])
	case k.Op == "transpose":
		r, err = be.transpose(bufs[0], k.Attrs.Perm)
	case k.Op == "const":
		r, err = be.constant(k.DType, k.Attrs.Scalar)
	case k.Op == "slice":
		r, err = be.sliceOp(k, bufs[0])
	case k.Op == "pad":
		r, err = be.pad(k, bufs[0])
	case k.Op == "reshape":
		r, err = be.reshape(bufs[0], out.Len)
	case slices.Contains(BinaryOps, k.Op):
		r, err = be.binary(k, bufs[0], bufs[1])
	case slices.Contains(UnaryOps, k.Op):
		r, err = be.unary(k, bufs[0])
	default:
		ok = false
	}
	return r, ok, err
}

// launchModel runs the model ops: reductions, losses, normalisations,
// the optimizer, lookups.
func (be *Backend) launchModel(k *plan.Kernel, bufs []*Buf, in []sbp.Block, out sbp.Block) (rt.Buffer, error) {
	switch {
	case k.Op == "nonfinite":
		return be.nonfinite(k, bufs[0])
	case k.Op == "max_grad":
		return be.maxGrad(k, bufs[0], bufs[1], bufs[2])
	case k.Op == "where":
		return be.where(k, bufs[0], bufs[1], bufs[2])
	case k.Op == "embedding":
		return be.embedding(k, bufs[0], bufs[1], in)
	case k.Op == "embedding_grad":
		return be.embeddingGrad(k, bufs[0], bufs[1], out)
	case k.Op == "cross_entropy":
		return be.crossEntropy(k, bufs[0], bufs[1], nil)
	case k.Op == "cross_entropy_grad":
		return be.crossEntropy(k, bufs[0], bufs[1], bufs[2])
	case strings.HasPrefix(k.Op, "adam_"):
		return be.adam(k, bufs)
	case k.Op == "sum" || k.Op == "mean" || k.Op == "max":
		return be.reduce(k, bufs[0])
	case k.Op == "mse":
		return be.mse(k, bufs[0], bufs[1])
	case k.Op == "softmax" || k.Op == "log_softmax":
		return be.softmax(k, bufs[0])
	case k.Op == "layernorm":
		return be.layernorm(k, bufs[0], bufs[1], bufs[2])
	case k.Op == "softmax_grad":
		return be.softmaxGrad(k, bufs[0], bufs[1])
	case k.Op == "normalize" || k.Op == "normalize_grad":
		return be.normalize(k, bufs)
	}
	return nil, fmt.Errorf("cuda: no kernel for %s", k.Op)
}

// fallback runs k on the CPU backend over host copies of args and copies
// the result in; the first time for an op and dtype it says so.
func (be *Backend) fallback(k *plan.Kernel, args []rt.Buffer, in []sbp.Block, out sbp.Block) (rt.Buffer, error) {
	key := k.Op + " " + k.DType.String()
	be.mu.Lock()
	be.fallbacks[key]++
	first := be.fallbacks[key] == 1
	be.mu.Unlock()
	if first && be.notify != nil {
		fmt.Fprintf(be.notify, "meshrun: cuda: no CUDA kernel for %s (%s): it runs on the CPU backend, its arguments copied out and its result back\n", k.Op, k.DType)
	}
	host := make([]*rt.Tensor, len(args))
	for i, a := range args {
		t, err := be.CopyOut(a)
		if err != nil {
			return nil, err
		}
		host[i] = t
	}
	res, err := be.cpu.Compute(&rt.OpCall{Kernel: k, Args: host, In: in, Out: out})
	if err != nil {
		return nil, err
	}
	return buffer(be.upload(res))
}

var nativeOps = []string{"matmul", "reshape", "transpose", "const", "adam_moment", "adam_moment2", "adam_update",
	"sum", "mean", "max", "mse", "softmax", "log_softmax", "layernorm", "softmax_grad", "normalize", "normalize_grad",
	"slice", "pad", "embedding", "embedding_grad", "cross_entropy", "cross_entropy_grad", "concat", "broadcast_to",
	"arange", "axis_index", "cast", "where", "max_grad", "nonfinite", "to_local", "from_local"}

// nativeMisc decides the ops whose dtype rules differ from the rest:
// concat (any dtype, every argument the kernel's), broadcast_to (f32,
// f64), arange and axis_index (no arguments; f32 results), cast (between
// f32 and f64).
func nativeMisc(k *plan.Kernel) (native, decided bool) {
	f := func(dt ir.DType) bool { return dt == ir.F32 || dt == ir.F64 }
	switch k.Op {
	case "concat":
		for _, dt := range k.ArgDTypes {
			if dt != k.DType {
				return false, true
			}
		}
		return len(k.ArgDTypes) > 0, true
	case "broadcast_to":
		return len(k.ArgDTypes) == 1 && k.ArgDTypes[0] == k.DType && f(k.DType), true
	case "arange", "axis_index":
		return len(k.ArgDTypes) == 0 && k.DType == ir.F32, true
	case "cast":
		return len(k.ArgDTypes) == 1 && f(k.ArgDTypes[0]) && f(k.DType), true
	}
	return false, false
}

var _ rt.Backend = (*Backend)(nil)
var _ rt.HostReader = (*Buf)(nil)
