package ops

import (
	"sort"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// The placement vocabulary, named as in package sbp so that the rules read
// the same here.
type (
	SBP    = sbp.SBP
	Sig    = sbp.Sig
	NdSig  = sbp.NdSig
	OpDesc = sbp.OpDesc
	Rule   = sbp.Rule
)

var (
	B    = sbp.B
	P    = sbp.P
	PMax = sbp.PMax
)

// S is a split along dim.
func S(dim int) SBP { return sbp.S(dim) }

// Op is everything meshrun knows about one op. Each op family's file
// registers its ops, once per op.
type Op struct {
	Name   string
	Family string
	Kind   Kind
	// Type checks a call's arguments and returns the result, not yet in a
	// graph; nil for ops only the compiler makes (const).
	Type TypeRule
	// Placement is the op's one-axis placement signatures; Register hands
	// it to package sbp, where inference looks it up.
	Placement Rule
	// Grad is the op's vector-Jacobian product. Nil: no gradient flows
	// when NoGrad (a constant, a piecewise-constant flag), else the op is
	// not differentiable (the gradient helpers: no second derivatives).
	Grad   GradRule
	NoGrad bool
	// Doc is the op's text in spec.md, which package specgen generates.
	Doc Doc
	// FLOPs is the op's arithmetic for the cost model (pipeline stage
	// balancing); nil: one per output element.
	FLOPs func(out []int, in [][]int) float64
	// InPlace[k] is the argument that result k may be written over
	// (buffer donation, plan.Instr.Donate; -1: none): its kernel reads
	// each element of that argument before it writes the same element of
	// result k, and no other result writes over it. Every backend that
	// writes results in place (rt.DonatingLauncher) runs every op listed
	// here in place (the runtime asks it to for instructions with several
	// results, adam_fused's: rt/donate.go; a one-result op listed here
	// needs that path first); nil: the op's results are always fresh.
	InPlace []int
}

// Doc is an op's spec text: its lines in the op tables and its examples in
// the placement-rule tables. An op documented by another op's line or
// example names that op instead (sub is on add's line), so nothing an op
// does goes undocumented.
type Doc struct {
	Rows      []Row
	RowsWith  string
	Examples  []Example
	RulesWith string
}

// Row is one line of an op table: how a program writes the call, the
// shape rule (forward ops) and what it computes.
type Row struct{ Call, Shape, Text string }

// Example is a use of an op with representative shapes, whose one-axis
// signatures spec.md lists.
type Example struct {
	Form string
	Desc OpDesc
}

// TypeRule types one call of an op (see Call).
type TypeRule func(b *Call) *ir.Value

// Kind says what an op is for.
type Kind uint8

const (
	Forward   Kind = iota // the ops programs compute with
	Helper                // the gradient helper ops autodiff builds backward graphs from
	Optim                 // the fused optimizer ops the training step uses
	LocalView             // the local view's boundary and collectives: placed by their attributes, not by rule tables
	Tier                  // copies between device and host memory (ZeRO-Offload), made by the training step only
	Fused                 // kernels lowering's fusion passes make from several ops a program calls; no program calls them
)

var (
	registry = map[string]*Op{}
	order    []string                // registration order
	calls    = map[string]TypeRule{} // call names that build another op
)

// Register adds an op. A second registration of a name is a programming
// error caught at start-up.
func Register(op Op) {
	if _, dup := registry[op.Name]; dup {
		panic("ops: duplicate op " + op.Name)
	}
	registry[op.Name] = &op
	order = append(order, op.Name)
	if op.Kind != LocalView { // placed by the local view's rules (package lower)
		sbp.Register(op.Family, op.Placement, op.Name)
	}
}

// RegisterCall adds a call name whose type rule builds another op
// (permute builds transpose).
func RegisterCall(name string, t TypeRule) {
	if _, dup := calls[name]; dup {
		panic("ops: duplicate call " + name)
	}
	calls[name] = t
}

// Lookup returns an op by name.
func Lookup(name string) (*Op, bool) {
	op, ok := registry[name]
	return op, ok
}

// TypeOf returns the type rule of a call name: an op's, or a call's that
// builds another op.
func TypeOf(name string) (TypeRule, bool) {
	if t, ok := calls[name]; ok {
		return t, true
	}
	if op, ok := registry[name]; ok && op.Type != nil {
		return op.Type, true
	}
	return nil, false
}

// Calls lists every name a program can call, sorted.
func Calls() []string {
	var out []string
	for n := range calls {
		out = append(out, n)
	}
	for n, op := range registry {
		if op.Type != nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// All lists every op in registration order.
func All() []*Op {
	out := make([]*Op, len(order))
	for i, n := range order {
		out[i] = registry[n]
	}
	return out
}

// Names lists the ops of a kind in registration order.
func Names(k Kind) []string {
	var out []string
	for _, n := range order {
		if registry[n].Kind == k {
			out = append(out, n)
		}
	}
	return out
}

// repeat returns n copies of s.
func repeat(s SBP, n int) []SBP {
	out := make([]SBP, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// FLOPs is the modelled arithmetic of computing v (KernelFLOPs); sources
// cost nothing.
func FLOPs(v *ir.Value) float64 {
	if v.IsSource() {
		return 0
	}
	in := make([][]int, len(v.Args))
	for i, a := range v.Args {
		in[i] = a.Type.Shape
	}
	return KernelFLOPs(v.Op, v.Type.Shape, in)
}

// KernelFLOPs is the modelled arithmetic of op with these global shapes:
// its FLOPs rule, or one per output element; unknown ops cost nothing.
func KernelFLOPs(name string, out []int, in [][]int) float64 {
	op, ok := Lookup(name)
	if !ok {
		return 0
	}
	if op.FLOPs == nil {
		return float64(numel(out))
	}
	return op.FLOPs(out, in)
}
