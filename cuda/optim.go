package cuda

import (
	"context"
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// Kernels with several results (plan.Instr.Outs). lower's Adam fusion
// (lower/fuse_adam.go) makes adam_fused, which the backend runs as one
// kernel, mr_adam_fused (optim.cu): one pass reads p, m, v and g and
// writes p', m' and v', seven parameter-sized streams where adam_moment,
// adam_moment2 and adam_update take ten. The arithmetic is the three
// kernels', so the bits are theirs and the CPU's.

// LaunchResults implements rt.ResultsLauncher: adam_fused in f32 and f64
// (lower fuses no other dtype), its arguments as fuse_adam.go orders them
// (p, m, v, g, β1, β2, step, root_bc2, eps, decay), its three results of
// block out.
func (be *Backend) LaunchResults(_ context.Context, k *plan.Kernel, args []rt.Buffer, _ []sbp.Block, out sbp.Block, n int) ([]rt.Buffer, error) {
	return be.adamFused(k, args, out, n, nil)
}

// LaunchDonated implements rt.DonatingLauncher: adam_fused writes p', m'
// and v' over the arguments donate names (plan.Instr.Donate), so a fused
// update allocates nothing, as the plan's memory replay counts it.
// mr_adam_fused is safe in place: each thread reads m[i] and v[i] before
// it writes nm[i] and nv[i], and p[i] before np[i] (it reads p[i] after
// storing nm[i] and nv[i], so only each result's own argument may be
// donated, as the plan's verifier requires), and its pointers carry no
// __restrict__ that would let the compiler reorder a read past an
// aliased write. Only an argument that is already this GPU's buffer is written
// over: a host tensor (uploaded for this launch) or another GPU's gets a
// fresh result, which the worker counts as an allocation.
func (be *Backend) LaunchDonated(_ context.Context, k *plan.Kernel, args []rt.Buffer, _ []sbp.Block, out sbp.Block, n int, donate []int) ([]rt.Buffer, error) {
	return be.adamFused(k, args, out, n, donate)
}

// adamFused launches mr_adam_fused; donate[r] ≥ 0 asks for result r to be
// written over that argument (one of p, m, v; nil: every result fresh).
func (be *Backend) adamFused(k *plan.Kernel, args []rt.Buffer, out sbp.Block, n int, donate []int) ([]rt.Buffer, error) {
	if k.Op != "adam_fused" || n != 3 || len(args) != 10 {
		return nil, fmt.Errorf("cuda: no kernel for %s with %d results and %d arguments", k.Op, n, len(args))
	}
	if err := rt.AdamDonation(donate); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	name, err := KernelName("adam_fused", k.DType)
	if err != nil {
		return nil, fmt.Errorf("%w (lower fuses no other dtype)", err)
	}
	bufs, done, err := be.onDevice(args)
	if err != nil {
		return nil, err
	}
	defer done() // stream order: uploaded temporaries are reused only after the launch
	elems := int64(count(out.Len))
	for i, b := range bufs {
		want := elems
		if i >= 4 {
			want = 1 // the scalars
		}
		if b.dt != k.DType || int64(count(b.shape)) != want {
			return nil, fmt.Errorf("cuda: adam_fused: argument %d is %s%s, want %s with %d elements", i+1, b.dt, ir.ShapeString(b.shape), k.DType, want)
		}
	}
	res := make([]*Buf, 3)
	var fresh []*Buf
	fail := func(err error) ([]rt.Buffer, error) {
		for _, r := range fresh {
			be.Free(r)
		}
		return nil, err
	}
	for r := range res {
		if a := donated(donate, r); a >= 0 {
			if x, ok := args[a].(*Buf); ok && x == bufs[a] {
				res[r] = x // this GPU's own buffer, not a temporary upload
				continue
			}
		}
		b, err := be.newBuf(k.DType, out.Len)
		if err != nil {
			return fail(err)
		}
		res[r] = b
		fresh = append(fresh, b)
	}
	p := new(params)
	for _, b := range append(res, bufs...) {
		p.ptr(b.ptr)
	}
	if err := be.dev.launch(name, elems, p.i64(elems)); err != nil {
		return fail(err)
	}
	return []rt.Buffer{res[0], res[1], res[2]}, nil
}

// donated is the argument result r is written over, or -1.
func donated(donate []int, r int) int {
	if donate == nil {
		return -1
	}
	return donate[r]
}

var (
	_ rt.ResultsLauncher  = (*Backend)(nil)
	_ rt.DonatingLauncher = (*Backend)(nil)
)
