package difftest

import (
	"fmt"
	"strings"
)

// statement applies one random op to earlier values. Arguments are kept
// tame so that a sharded run and a single-device run stay comparable:
// exp sees tanh's range, log and sqrt values ≥ 1, a divisor values ≥ 1.
func (g *gen) statement() {
	v := g.pick()
	ops := []func(value) bool{g.binary, g.unary, g.cast, g.where, g.matmul, g.rowwise,
		g.reduce, g.shapeOp, g.concatSlice, g.to, g.embedding, g.loss, g.grad, g.cancel}
	for tries := 0; tries < 8; tries++ {
		if ops[g.c.n(len(ops))](v) {
			return
		}
	}
	g.assign("-"+v.name, v.dt, v.shape)
}

func (g *gen) binary(v value) bool {
	w := g.like(v)
	shape := broadcast(v.shape, w.shape)
	switch g.c.n(6) {
	case 0:
		g.assign(v.name+" + "+w.name, v.dt, shape)
	case 1:
		g.assign(v.name+" - "+w.name, v.dt, shape)
	case 2:
		g.assign(v.name+" * "+w.name, v.dt, shape)
	case 3:
		g.assign(fmt.Sprintf("%s / (%s * %s + 1)", v.name, w.name, w.name), v.dt, shape)
	case 4:
		g.assign(fmt.Sprintf("minimum(%s, %s)", v.name, w.name), v.dt, shape)
	default:
		g.assign(fmt.Sprintf("maximum(%s, %s)", v.name, w.name), v.dt, shape)
	}
	return true
}

func (g *gen) unary(v value) bool {
	forms := []string{"neg(%s)", "exp(tanh(%s))", "log(%s * %s + 1)", "sqrt(%s * %s + 1)", "tanh(%s)", "relu(%s)", "sigmoid(%s)", "gelu(%s)", "%s * 2.5"}
	f := forms[g.c.n(len(forms))]
	args := []any{v.name}
	if strings.Count(f, "%s") == 2 {
		args = append(args, v.name)
	}
	g.assign(fmt.Sprintf(f, args...), v.dt, v.shape)
	return true
}

func (g *gen) cast(v value) bool {
	dt := floats[g.c.n(len(floats))]
	if dt == v.dt {
		return false
	}
	g.assign(fmt.Sprintf("cast(%s, %q)", v.name, dt), dt, v.shape)
	return true
}

func (g *gen) where(v value) bool {
	c := g.like(v)
	w := g.like(v)
	shape := broadcast(broadcast(v.shape, c.shape), w.shape)
	g.assign(fmt.Sprintf("where(%s, %s, %s)", c.name, v.name, w.name), v.dt, shape)
	return true
}

// matmul multiplies v ([..., m, k]) by a new input [k, n] or, batched,
// [b, k, n].
func (g *gen) matmul(v value) bool {
	if v.rank() < 2 || v.rank() > 3 {
		return false
	}
	k, n := v.shape[v.rank()-1], 1+g.c.n(5)
	ws := []int{k, n}
	if v.rank() == 3 && g.c.pct(50) {
		ws = []int{v.shape[0], k, n}
	}
	w := g.input(v.dt, ws)
	out := append(append([]int(nil), v.shape[:v.rank()-1]...), n)
	g.assign(v.name+" @ "+w.name, v.dt, out)
	return true
}

func (g *gen) rowwise(v value) bool {
	if v.rank() == 0 {
		return false
	}
	ax := g.c.n(v.rank())
	switch g.c.n(3) {
	case 0:
		g.assign(fmt.Sprintf("softmax(%s, axis=%d)", v.name, ax), v.dt, v.shape)
	case 1:
		g.assign(fmt.Sprintf("log_softmax(%s, axis=%d)", v.name, ax), v.dt, v.shape)
	default:
		last := v.shape[v.rank()-1]
		gamma, beta := g.input(v.dt, []int{last}), g.input(v.dt, []int{last})
		g.assign(fmt.Sprintf("layernorm(%s, %s, %s)", v.name, gamma.name, beta.name), v.dt, v.shape)
	}
	return true
}

func (g *gen) reduce(v value) bool {
	op := []string{"sum", "mean", "max", "nonfinite"}[g.c.n(4)]
	if op == "nonfinite" || v.rank() == 0 || g.c.pct(30) {
		g.assign(fmt.Sprintf("%s(%s)", op, v.name), v.dt, []int{})
		return true
	}
	ax := g.c.n(v.rank())
	out := append(append([]int(nil), v.shape[:ax]...), v.shape[ax+1:]...)
	g.assign(fmt.Sprintf("%s(%s, axis=%d)", op, v.name, ax), v.dt, out)
	return true
}

func (g *gen) shapeOp(v value) bool {
	switch g.c.n(3) {
	case 0:
		if v.rank() < 2 {
			return false
		}
		d0, d1 := g.c.n(v.rank()), g.c.n(v.rank())
		out := append([]int(nil), v.shape...)
		out[d0], out[d1] = out[d1], out[d0]
		g.assign(fmt.Sprintf("transpose(%s, %d, %d)", v.name, d0, d1), v.dt, out)
	case 1:
		if v.rank() < 2 {
			return false
		}
		perm := g.c.r.Perm(v.rank())
		var ps []string
		out := make([]int, v.rank())
		for i, p := range perm {
			ps = append(ps, fmt.Sprint(p))
			out[i] = v.shape[p]
		}
		g.assign(fmt.Sprintf("permute(%s, %s)", v.name, strings.Join(ps, ", ")), v.dt, out)
	default:
		return g.reshape(v)
	}
	return true
}

// reshape flattens v, or merges two neighbouring dims, or splits off a
// unit dim.
func (g *gen) reshape(v value) bool {
	n := 1
	for _, d := range v.shape {
		n *= d
	}
	var out []int
	switch {
	case v.rank() >= 2 && g.c.pct(50):
		i := g.c.n(v.rank() - 1)
		out = append(append(append([]int(nil), v.shape[:i]...), v.shape[i]*v.shape[i+1]), v.shape[i+2:]...)
	case g.c.pct(50):
		out = []int{n}
	default:
		i := g.c.n(v.rank() + 1)
		out = append(append(append([]int(nil), v.shape[:i]...), 1), v.shape[i:]...)
	}
	var ds []string
	for _, d := range out {
		ds = append(ds, fmt.Sprint(d))
	}
	g.assign(fmt.Sprintf("reshape(%s, %s)", v.name, strings.Join(ds, ", ")), v.dt, out)
	return true
}

func (g *gen) concatSlice(v value) bool {
	if v.rank() == 0 {
		return false
	}
	ax := g.c.n(v.rank())
	out := append([]int(nil), v.shape...)
	if g.c.pct(50) {
		s := append([]int(nil), v.shape...)
		s[ax] = 1 + g.c.n(3)
		w := g.input(v.dt, s)
		out[ax] += s[ax]
		g.assign(fmt.Sprintf("concat(%s, %s, axis=%d)", v.name, w.name, ax), v.dt, out)
		return true
	}
	start := g.c.n(v.shape[ax])
	end := start + 1 + g.c.n(v.shape[ax]-start)
	out[ax] = end - start
	g.assign(fmt.Sprintf("slice(%s, %d, %d, %d)", v.name, ax, start, end), v.dt, out)
	return true
}

func (g *gen) to(v value) bool {
	g.assign(fmt.Sprintf("to(%s, %s)", v.name, g.placement(v.rank(), true)), v.dt, v.shape)
	return true
}

// embedding looks up rows of a new table with a new index input.
func (g *gen) embedding(v value) bool {
	vocab, hidden := 1+g.c.n(6), 1+g.c.n(4)
	w := g.input(v.dt, []int{vocab, hidden})
	shape := g.shape(1 + g.c.n(2))
	idx := g.intInput(shape, vocab)
	g.assign(fmt.Sprintf("embedding(%s, %s)", w.name, idx), v.dt, append(shape, hidden))
	return true
}

func (g *gen) loss(v value) bool {
	if v.rank() == 2 && g.c.pct(50) {
		labels := g.intInput([]int{v.shape[0]}, v.shape[1])
		g.assign(fmt.Sprintf("cross_entropy(%s, %s)", v.name, labels), v.dt, []int{})
		return true
	}
	w := g.input(v.dt, v.shape)
	g.assign(fmt.Sprintf("mse(%s, %s)", v.name, w.name), v.dt, []int{})
	return true
}

// grad differentiates a scalar made from v with respect to an input of
// v's dtype, or to v itself (an intermediate).
func (g *gen) grad(v value) bool {
	if g.grads > 0 {
		return false // a second grad could differentiate the first (unsupported)
	}
	g.grads++
	var xs []value
	for _, x := range g.inputs {
		if x.dt == v.dt {
			xs = append(xs, x)
		}
	}
	xs = append(xs, v)
	x := xs[g.c.n(len(xs))]
	y := g.fresh()
	g.lines = append(g.lines, fmt.Sprintf("%s = sum(%s * %s)", y, v.name, v.name))
	g.assign(fmt.Sprintf("grad(%s, %s)", y, x.name), x.dt, x.shape)
	return true
}

// cancel makes rounding matter: it sums v + 2^16 along an axis (on a split
// axis: partials of about 2^16·n/p each), casts the sum to a coarser
// dtype and subtracts the 2^16·n it added, leaving a small result. Any
// rounding of the partials instead of their sum shows at the coarse
// dtype's spacing near 2^16·n, far beyond the tolerance of a result of
// order 1; rounding the sum once gives both runs the same value. f16 has
// no room for 2^16, so v must be f32 or f64.
func (g *gen) cancel(v value) bool {
	if v.rank() == 0 || (v.dt != "f64" && v.dt != "f32") {
		return false
	}
	to := "bf16"
	if v.dt == "f64" && g.c.pct(50) {
		to = "f32"
	}
	ax := g.c.n(v.rank())
	out := append(append([]int(nil), v.shape[:ax]...), v.shape[ax+1:]...)
	g.assign(fmt.Sprintf("cast(sum(%s + 65536, axis=%d), %q) - %d", v.name, ax, to, 65536*v.shape[ax]), to, out)
	return true
}
