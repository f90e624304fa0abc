package ad

import (
	"runtime"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/stretchr/testify/require"
)

// builder applies ops straight through their type rules and ir.Builder:
// the pass needs nothing of the language.
type builder struct {
	t *testing.T
	b *ir.Builder
}

func (b builder) Graph() *ir.Graph { return b.b.Graph() }

func (b builder) Add(v *ir.Value) *ir.Value {
	v, err := b.b.Add(v)
	require.NoError(b.t, err)
	return v
}

func (b builder) Const(f float64, dt ir.DType, pos ir.Pos) *ir.Value {
	return b.Add(&ir.Value{Op: "const", Type: ir.Type{DType: dt, Shape: []int{}}, Attrs: ir.Attrs{Scalar: f}, Pos: pos})
}

func (b builder) Apply(pos ir.Pos, name string, kw map[string]ops.Arg, args ...ops.Arg) *ir.Value {
	rule, ok := ops.TypeOf(name)
	require.True(b.t, ok, name)
	if kw == nil {
		kw = map[string]ops.Arg{}
	}
	call := &ops.Call{Name: name, Pos: pos, Args: args, Kw: kw, Const: func(f float64, dt ir.DType) *ir.Value { return b.Const(f, dt, pos) }}
	v := rule(call)
	require.Empty(b.t, call.Err())
	return b.Add(v)
}

func source(b builder, op, name string, shape ...int) *ir.Value {
	return b.Add(&ir.Value{Op: op, Name: name, Type: ir.Type{DType: ir.F32, Shape: shape}, Attrs: ir.Attrs{Init: &ir.Init{Kind: "ones"}}})
}

// y = sum(x * w) with w broadcast over x's rows: w's adjoint is the column
// sums of x, built as backward values the verifier accepts.
func TestBackwardOfAProduct(t *testing.T) {
	b := builder{t, ir.NewBuilder(&ir.Graph{})}
	x := source(b, "input", "x", 2, 3)
	w := source(b, "param", "w", 3)
	y := b.Apply(ir.Pos{}, "sum", nil, ops.Arg{V: b.Apply(ir.Pos{}, "mul", nil, ops.Arg{V: x}, ops.Arg{V: w})})
	adj, err := Backward(b, y, nil)
	require.NoError(t, err)
	gw := adj.Of[w]
	require.NotNil(t, gw)
	require.Equal(t, []int{3}, gw.Type.Shape)
	require.True(t, gw.Backward)
	require.Equal(t, []int{2, 3}, adj.Of[x].Type.Shape)
	require.NoError(t, ir.Verify(b.Graph()))
}

// A hook sees a watched value's adjoint once the backward completes it.
func TestOnFinalReplacesTheAdjoint(t *testing.T) {
	b := builder{t, ir.NewBuilder(&ir.Graph{})}
	w := source(b, "param", "w", 3)
	y := b.Apply(ir.Pos{}, "sum", nil, ops.Arg{V: b.Apply(ir.Pos{}, "exp", nil, ops.Arg{V: w})})
	var seen *ir.Value
	adj, err := Backward(b, y, map[*ir.Value]func(*ir.Value) *ir.Value{w: func(g *ir.Value) *ir.Value {
		seen = g
		return b.Apply(ir.Pos{}, "neg", nil, ops.Arg{V: g})
	}})
	require.NoError(t, err)
	require.NotNil(t, seen)
	require.Equal(t, "neg", adj.Of[w].Op)
	require.Equal(t, seen, adj.Of[w].Args[0])
}

func TestNoSecondDerivatives(t *testing.T) {
	b := builder{t, ir.NewBuilder(&ir.Graph{})}
	w := source(b, "param", "w", 3)
	y := b.Apply(ir.Pos{}, "sum", nil, ops.Arg{V: b.Apply(ir.Pos{}, "relu_grad", nil, ops.Arg{V: w})})
	_, err := Backward(b, y, nil)
	require.ErrorContains(t, err, "no gradient for relu_grad (second derivatives are not supported)")
}

// Backward's cost is the size of y's cone, not of the graph: a training
// step differentiates each micro-batch's loss in a graph holding every
// earlier micro-batch, so a walk of the whole graph per loss made checking
// quadratic in the number of micro-batches. 100000 values y does not
// depend on must cost it nothing (before, it built maps over all of them:
// several MiB).
func TestBackwardIgnoresValuesOutsideItsCone(t *testing.T) {
	b := builder{t, ir.NewBuilder(&ir.Graph{})}
	w := source(b, "param", "w", 3)
	z := source(b, "input", "z", 3)
	for i := 0; i < 100000; i++ {
		z = b.Apply(ir.Pos{}, "neg", nil, ops.Arg{V: z})
	}
	y := b.Apply(ir.Pos{}, "sum", nil, ops.Arg{V: b.Apply(ir.Pos{}, "exp", nil, ops.Arg{V: w})})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	adj, err := Backward(b, y, nil)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.NotNil(t, adj.Of[w])
	require.Nil(t, adj.Of[z])
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10))
}
