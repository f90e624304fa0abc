package ops

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
)

// Elementwise ops. A split passes through when every input that has the
// split dim (not broadcast) is split the same way; inputs that broadcast
// along it are B. Partial values pass only through linear maps: neg, add and
// sub of partials, mul and div by a broadcast factor. Never through cast:
// rounding is not linear.

func init() {
	Register(Op{Name: "add", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: addVJP,
		Doc: Doc{Rows: []Row{{"`a + b`, `a - b`, `a * b`, `a / b`", "NumPy broadcast", "elementwise"}},
			Examples: []Example{{"Y[m,n] = A[m,n] + B[n] (also sub)", OpDesc{In: [][]int{{4, 4}, {4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "sub", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: subVJP,
		Doc: Doc{RowsWith: "add", RulesWith: "add"}})
	Register(Op{Name: "mul", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: mulVJP,
		Doc: Doc{RowsWith: "add",
			Examples: []Example{{"Y[m,n] = A[m,n] * B[m,n]", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "div", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: divVJP,
		Doc: Doc{RowsWith: "add",
			Examples: []Example{{"Y[m,n] = A[m,n] / B[m,n]", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "minimum", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: minMaxVJP,
		Doc: Doc{Rows: []Row{{"`minimum(a, b)`, `maximum(a, b)`", "NumPy broadcast", "elementwise; the gradient goes to the chosen operand (ties: to b)"}},
			Examples: []Example{{"Y[m,n] = minimum(A[m,n], B[m,n]) (also maximum)", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "maximum", Family: "binary", Type: binaryOp, Placement: Rule{Sigs: binarySigs}, Grad: minMaxVJP,
		Doc: Doc{RowsWith: "minimum", RulesWith: "minimum"}})
	Register(Op{Name: "neg", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(true)}, Grad: negVJP,
		Doc: Doc{Rows: []Row{{"`-a`, `neg(a)`, `exp`, `log`, `sqrt`, `tanh`, `relu`, `sigmoid`", "same shape", "elementwise; `sigmoid(x) = 1/(1+e^-x)`"}},
			Examples: []Example{{"Y[m,n] = -A[m,n]", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "exp", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: expVJP,
		Doc: Doc{RowsWith: "neg",
			Examples: []Example{{"Y = f(A[m,n]) for exp log sqrt tanh relu gelu sigmoid cast", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "log", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: logVJP,
		Doc: Doc{RowsWith: "neg", RulesWith: "exp"}})
	Register(Op{Name: "sqrt", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: sqrtVJP,
		Doc: Doc{RowsWith: "neg", RulesWith: "exp"}})
	Register(Op{Name: "tanh", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: tanhVJP,
		Doc: Doc{RowsWith: "neg", RulesWith: "exp"}})
	Register(Op{Name: "relu", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: reluVJP,
		Doc: Doc{RowsWith: "neg", RulesWith: "exp"}})
	Register(Op{Name: "gelu", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: geluVJP,
		Doc: Doc{Rows: []Row{{"`gelu(a)`", "same shape", "the exact form, PyTorch's default: `x·Φ(x) = ½x(1 + erf(x/√2))`"}},
			RulesWith: "exp"}})
	Register(Op{Name: "sigmoid", Family: "unary", Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: sigmoidVJP,
		Doc: Doc{RowsWith: "neg", RulesWith: "exp"}})
	// cast rounds, and a rounding of partial values is not the rounding of
	// their sum (cast(1000.3 + -1000, "bf16") is 0.30078125, cast of each
	// then summed is 0): a partial input is reduced first.
	Register(Op{Name: "cast", Family: "unary", Type: castOp, Placement: Rule{Sigs: unarySigs(false)}, Grad: castVJP,
		Doc: Doc{Rows: []Row{{"`cast(x, \"bf16\")`", "same shape", "to another float dtype (`\"f32\"`, `\"f64\"`, `\"bf16\"`, `\"f16\"`), rounded to nearest even"}},
			RulesWith: "exp"}})
	Register(Op{Name: "where", Family: "binary", Type: whereOp, Placement: Rule{Sigs: binarySigs}, Grad: whereVJP,
		Doc: Doc{Rows: []Row{{"`where(c, a, b)`", "NumPy broadcast", "`a` where `c ≠ 0`, else `b`; `c` must be a float tensor, of any float dtype (an integer condition is an error); differentiable in `a` and `b`"}},
			Examples: []Example{{"Y[m,n] = where(C[m,1], A[m,n], B[n])", OpDesc{In: [][]int{{4, 1}, {4, 4}, {4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "const", Family: "const", Placement: Rule{Sigs: constSigs}, NoGrad: true,
		Doc: Doc{Examples: []Example{{"a number used as a tensor", OpDesc{Out: []int{}}}}}})
}

func constSigs(d *OpDesc) []Sig {
	return []Sig{{Out: B, Why: "a constant is the same everywhere"}}
}

func unarySigs(linear bool) func(d *OpDesc) []Sig {
	return func(d *OpDesc) []Sig {
		var out []Sig
		for i := range d.In[0] {
			out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: "elementwise: a split passes through"})
		}
		out = append(out, Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"})
		if linear {
			out = append(out, Sig{In: []SBP{P}, Out: P, Why: d.Op + " is linear, so partial stays partial"})
		}
		return out
	}
}

func binarySigs(d *OpDesc) []Sig {
	var out []Sig
	R := len(d.Out)
	for j := 0; j < R; j++ {
		sig := Sig{In: make([]SBP, len(d.In)), Out: S(j), Why: fmt.Sprintf("elementwise: split along dim %d passes through; broadcast inputs replicated", j)}
		any := false
		for i, s := range d.In {
			k := j - (R - len(s))
			if k >= 0 && s[k] == d.Out[j] {
				sig.In[i] = S(k)
				any = true
			} else {
				sig.In[i] = B
			}
		}
		if any {
			out = append(out, sig)
		}
	}
	out = append(out, Sig{In: repeat(B, len(d.In)), Out: B, Why: "replicated in, replicated out"})
	switch d.Op {
	case "add", "sub":
		out = append(out, Sig{In: repeat(P, len(d.In)), Out: P, Why: d.Op + " is additive: a sum of partials is the partial of the sum"})
	case "mul":
		out = append(out, Sig{In: []SBP{P, B}, Out: P, Why: "mul is linear in one argument: partial times replicated stays partial"})
		out = append(out, Sig{In: []SBP{B, P}, Out: P, Why: "mul is linear in one argument: replicated times partial stays partial"})
	case "div":
		out = append(out, Sig{In: []SBP{P, B}, Out: P, Why: "div is linear in its numerator"})
	}
	return out
}

func unaryOp(b *Call) *ir.Value {
	if !b.NArgs(1, 1) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	return b.NewValue(x.Type, x)
}

// Broadcast computes NumPy's broadcast of two shapes.
func Broadcast(a, b []int) ([]int, bool) {
	return BroadcastAppend(make([]int, 0, max(len(a), len(b))), a, b)
}

// BroadcastAppend is Broadcast appending the shape to dst: a caller that
// only reads the shape passes a buffer on its stack (the runtime's
// elementwise kernels, once per instruction).
func BroadcastAppend(dst, a, b []int) ([]int, bool) {
	n := max(len(a), len(b))
	for i := 0; i < n; i++ {
		x, y := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			x = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			y = b[j]
		}
		switch {
		case x == y || y == 1:
			dst = append(dst, x)
		case x == 1:
			dst = append(dst, y)
		default:
			return nil, false
		}
	}
	return dst, true
}

func binaryOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	var like *ir.Value
	if b.Args[0].V != nil {
		like = b.Args[0].V
	} else {
		like = b.Args[1].V
	}
	x, y := b.Tensor(0, like), b.Tensor(1, like)
	if !b.floatTensor(x) || !b.floatTensor(y) || !b.sameDType(x, y) {
		return nil
	}
	shape, ok := Broadcast(x.Type.Shape, y.Type.Shape)
	if !ok {
		return b.Failf("shape mismatch in %s: %s and %s do not broadcast", b.Name, ir.ShapeString(x.Type.Shape), ir.ShapeString(y.Type.Shape))
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x, y)
}

// whereOp is where(c, a, b): a where c is non-zero, else b, elementwise
// with NumPy broadcasting (a float c: 0 is false).
func whereOp(b *Call) *ir.Value {
	if !b.NArgs(3, 3) {
		return nil
	}
	var like *ir.Value
	for _, a := range b.Args[1:] {
		if a.V != nil {
			like = a.V
		}
	}
	cond, x, y := b.Tensor(0, like), b.Tensor(1, like), b.Tensor(2, like)
	if !b.floatTensor(cond) || !b.floatTensor(x) || !b.floatTensor(y) || !b.sameDType(x, y) {
		return nil
	}
	shape, ok := Broadcast(x.Type.Shape, y.Type.Shape)
	if ok {
		shape, ok = Broadcast(shape, cond.Type.Shape)
	}
	if !ok {
		return b.Failf("shape mismatch in where: %s, %s and %s do not broadcast", ir.ShapeString(cond.Type.Shape), ir.ShapeString(x.Type.Shape), ir.ShapeString(y.Type.Shape))
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, cond, x, y)
}

// castOp is cast(x, "bf16"): a float tensor in another float dtype,
// rounded to nearest (ties to even).
func castOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	s := b.Args[1].Str
	dt, ok := ir.DType(0), false
	if s != nil {
		dt, ok = ir.ParseDType(*s)
	}
	if !ok || !dt.IsFloat() {
		return b.Failf("cast(x, \"dtype\"): the dtype must be \"f32\", \"f64\", \"bf16\" or \"f16\"")
	}
	return b.NewValue(ir.Type{DType: dt, Shape: x.Type.Shape}, x)
}

// addVJP is the gradient of add.
func addVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.unbroadcast(g, a[0].Type.Shape))
	b.acc(a[1], b.unbroadcast(g, a[1].Type.Shape))
}

// subVJP is the gradient of sub.
func subVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.unbroadcast(g, a[0].Type.Shape))
	b.acc(a[1], b.unbroadcast(b.op("neg", T(g)), a[1].Type.Shape))
}

// mulVJP is the gradient of mul.
func mulVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.unbroadcast(b.op("mul", T(g), T(b.val(a[1]))), a[0].Type.Shape))
	b.acc(a[1], b.unbroadcast(b.op("mul", T(g), T(b.val(a[0]))), a[1].Type.Shape))
}

// divVJP is the gradient of div.
func divVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.unbroadcast(b.op("div", T(g), T(b.val(a[1]))), a[0].Type.Shape))
	b.acc(a[1], b.unbroadcast(b.op("neg", T(b.op("div", T(b.op("mul", T(g), T(b.val(v)))), T(b.val(a[1]))))), a[1].Type.Shape))
}

// negVJP is the gradient of neg.
func negVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("neg", T(g)))
}

// expVJP is the gradient of exp.
func expVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.op("mul", T(g), T(b.val(v))))
}

// logVJP is the gradient of log.
func logVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("div", T(g), T(b.val(a[0]))))
}

// sqrtVJP is the gradient of sqrt.
func sqrtVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.op("div", T(b.op("mul", T(g), N(0.5))), T(b.val(v))))
}

// tanhVJP is the gradient of tanh.
func tanhVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.op("mul", T(g), T(b.op("sub", N(1), T(b.op("mul", T(b.val(v)), T(b.val(v))))))))
}

// sigmoidVJP is the gradient of sigmoid.
func sigmoidVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.op("mul", T(g), T(b.op("mul", T(b.val(v)), T(b.op("sub", N(1), T(b.val(v))))))))
}

// reluVJP is the gradient of relu.
func reluVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("mul", T(g), T(b.op("relu_grad", T(b.val(a[0]))))))
}

// geluVJP is the gradient of gelu.
func geluVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("mul", T(g), T(b.op("gelu_grad", T(b.val(a[0]))))))
}

// minMaxVJP is the gradient of minimum and maximum.
func minMaxVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	// the gradient goes to the operand that was chosen; ties go to the
	// second (relu_grad is 1 only for a strictly positive difference)
	d := b.op("sub", T(b.val(a[1])), T(b.val(a[0])))
	if v.Op == "maximum" {
		d = b.op("neg", T(d))
	}
	first := b.op("relu_grad", T(d))
	b.acc(a[0], b.unbroadcast(b.op("mul", T(g), T(first)), a[0].Type.Shape))
	b.acc(a[1], b.unbroadcast(b.op("mul", T(g), T(b.op("sub", N(1), T(first)))), a[1].Type.Shape))
}

// whereVJP is the gradient of where.
func whereVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[1], b.unbroadcast(b.op("where", T(b.val(a[0])), T(g), N(0)), a[1].Type.Shape))
	b.acc(a[2], b.unbroadcast(b.op("where", T(b.val(a[0])), N(0), T(g)), a[2].Type.Shape))
}

// castVJP is the gradient of cast.
func castVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("cast", T(g), Str(a[0].Type.DType.String())))
}
