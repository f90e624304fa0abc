package cuda

import (
	"context"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// Half precision (bf16, f16) as the CPU backend computes it: every half
// operand widened to f32, the f32 kernel, the result rounded once to the
// kernel's dtype (to nearest, ties to even). The conversions are kernels
// on bit patterns (memory.cu) that reproduce rt's F32ToBF16, F32ToF16,
// BF16ToF32 and F16ToF32 bit for bit; so a half op is native exactly when
// its f32 form is.

func isHalf(dt ir.DType) bool { return dt == ir.BF16 || dt == ir.F16 }

// widened is k with its half dtypes replaced by f32, and whether that
// kernel is native (false too when k has no half dtype).
func widened(k *plan.Kernel) (*plan.Kernel, bool) {
	half := isHalf(k.DType)
	for _, dt := range k.ArgDTypes {
		half = half || isHalf(dt)
	}
	if !half {
		return nil, false
	}
	kw := *k
	if isHalf(kw.DType) {
		kw.DType = ir.F32
	}
	kw.ArgDTypes = slices.Clone(k.ArgDTypes)
	for i, dt := range kw.ArgDTypes {
		if isHalf(dt) {
			kw.ArgDTypes[i] = ir.F32
		}
	}
	return &kw, Native(&kw)
}

// launchHalf runs k through its f32 form kw.
func (be *Backend) launchHalf(ctx context.Context, k, kw *plan.Kernel, args []rt.Buffer, in []sbp.Block, out sbp.Block) (rt.Buffer, error) {
	bufs, done, err := be.onDevice(args)
	if err != nil {
		return nil, err
	}
	defer done()
	wide := make([]rt.Buffer, len(bufs))
	var temps []*Buf
	defer func() {
		for _, t := range temps {
			be.Free(t)
		}
	}()
	for i, b := range bufs {
		wide[i] = b
		if isHalf(b.dt) {
			w, err := be.convert(b, ir.F32)
			if err != nil {
				return nil, err
			}
			temps = append(temps, w)
			wide[i] = w
		}
	}
	res, err := be.Launch(ctx, kw, wide, in, out)
	if err != nil || !isHalf(k.DType) {
		return res, err
	}
	r := res.(*Buf)
	defer be.Free(r)
	return buffer(be.convert(r, k.DType))
}

// convert widens a half buffer to f32 or narrows an f32 one to a half
// dtype.
func (be *Backend) convert(x *Buf, to ir.DType) (*Buf, error) {
	out, err := be.newBuf(to, x.shape)
	if err != nil {
		return nil, err
	}
	name := "mr_widen_" + x.dt.String()
	if to != ir.F32 {
		name = "mr_narrow_" + to.String()
	}
	n := int64(count(x.shape))
	if n > 0 {
		err = be.dev.launch(name, n, new(params).ptr(out.ptr).ptr(x.ptr).i64(n))
	}
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}
