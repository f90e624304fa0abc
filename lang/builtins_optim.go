package lang

import "slices"

// Fused optimizer ops: the Adam update in three passes over the
// parameters instead of a dozen elementwise ops (as torch.optim's fused and
// foreach kernels do). Callable like other ops; the train block uses them.
//
//	adam_moment(m, g, beta)       = beta·m + (1 − beta)·g
//	adam_moment2(v, g, beta)      = beta·v + (1 − beta)·g²
//	adam_update(p, m, v, step, root_bc2, eps, decay)
//	                              = p·decay − step·m / (√v / root_bc2 + eps)
//
// The tensors share one shape; beta, step, root_bc2, eps and decay are
// scalars. They have no gradient.

func init() {
	builtins["adam_moment"] = fusedOp(2)
	builtins["adam_moment2"] = fusedOp(2)
	builtins["adam_update"] = fusedOp(3)
}

// OptimOps lists the fused optimizer ops.
func OptimOps() []string { return []string{"adam_moment", "adam_moment2", "adam_update"} }

// fusedOp checks an op whose first n arguments are tensors of one shape and
// whose remaining arguments are scalars.
func fusedOp(n int) builtinFn {
	return func(c *Checker, b *binder) *Value {
		total := map[int]int{2: 3, 3: 7}[n]
		if !c.nargs(b, total, total) {
			return nil
		}
		first := c.tensor(b, 0, nil)
		if !c.floatTensor(b, first) {
			return nil
		}
		args := []*Value{first}
		for i := 1; i < total; i++ {
			a := c.tensor(b, i, first)
			if !c.floatTensor(b, a) || !c.sameDType(b, first, a) {
				return nil
			}
			if i < n && !slices.Equal(a.Type.Shape, first.Type.Shape) {
				return c.fail(b, "shape mismatch in %s: %s and %s", b.name, ShapeString(first.Type.Shape), ShapeString(a.Type.Shape))
			}
			if i >= n && a.Type.Rank() != 0 {
				return c.fail(b, "%s: argument %d must be a scalar", b.name, i+1)
			}
			args = append(args, a)
		}
		return newValue(b, first.Type, args...)
	}
}
