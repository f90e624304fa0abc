package ir

import (
	"testing"

	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// small builds x (a [4, 8] input split over dp), y = relu(x) and output y.
func small(t *testing.T) (*Graph, *Value, *Value) {
	t.Helper()
	g := &Graph{Mesh: mesh.New("M", mesh.Axis{Name: "dp", Size: 2})}
	b := NewBuilder(g)
	f32 := Type{DType: F32, Shape: []int{4, 8}}
	x, err := b.Add(&Value{Op: "input", Type: f32, Name: "x", Declared: sbp.NdSBP{sbp.S(0)}, Attrs: Attrs{Init: &Init{Kind: "ones"}}})
	require.NoError(t, err)
	y, err := b.Add(&Value{Op: "relu", Type: f32, Args: []*Value{x}, Name: "y"})
	require.NoError(t, err)
	g.Outputs = []*Output{{Name: "y", Value: y}}
	require.NoError(t, Verify(g))
	return g, x, y
}

func TestBuilderNumbersValuesInOrder(t *testing.T) {
	g, x, y := small(t)
	require.Equal(t, []*Value{x, y}, g.Values)
	require.Equal(t, 0, x.ID)
	require.Equal(t, 1, y.ID)
}

// The builder refuses what would break the graph, with an error at the
// value's position, and leaves the graph as it was.
func TestBuilderRejects(t *testing.T) {
	pos := Pos{Filename: "m.mesh", Line: 3, Column: 5}
	f32 := Type{DType: F32, Shape: []int{4, 8}}
	stranger := &Value{ID: 0, Op: "input", Type: f32, Attrs: Attrs{Init: &Init{Kind: "ones"}}}
	for name, tc := range map[string]struct {
		v    *Value
		want string
	}{
		"argument from elsewhere": {&Value{Op: "relu", Type: f32, Args: []*Value{stranger}, Pos: pos}, "argument 1 of relu is not a value of this graph"},
		"nil argument":            {&Value{Op: "relu", Type: f32, Args: []*Value{nil}, Pos: pos}, "argument 1 of relu is not a value"},
		"no op":                   {&Value{Type: f32, Pos: pos}, "without an op"},
		"invalid dtype":           {&Value{Op: "const", Pos: pos}, "invalid dtype"},
		"negative dim":            {&Value{Op: "const", Type: Type{DType: F32, Shape: []int{-1}}, Pos: pos}, "negative dim"},
		"placement too long":      {&Value{Op: "to", Type: f32, Declared: sbp.NdSBP{sbp.B, sbp.B}, Pos: pos}, "2 entries for a mesh of 1 axes"},
		"split past the rank":     {&Value{Op: "to", Type: f32, Declared: sbp.NdSBP{sbp.S(2)}, Pos: pos}, "splits dim 2 of a rank-2 tensor"},
		"source without init":     {&Value{Op: "param", Type: f32, Pos: pos}, "no initialiser"},
	} {
		t.Run(name, func(t *testing.T) {
			g, _, _ := small(t)
			n := len(g.Values)
			_, err := NewBuilder(g).Add(tc.v)
			require.ErrorContains(t, err, tc.want)
			if tc.v.Pos == pos {
				require.ErrorContains(t, err, "m.mesh:3:5: ")
			}
			require.Len(t, g.Values, n)
		})
	}
	_, err := NewBuilder(&Graph{}).Add(nil)
	require.Error(t, err)
}

// Verify finds what a pass rewriting the graph by hand can get wrong.
func TestVerifyFinds(t *testing.T) {
	for name, tc := range map[string]struct {
		breakIt func(g *Graph, x, y *Value)
		want    string
	}{
		"duplicate ID":          {func(g *Graph, x, y *Value) { y.ID = 0 }, "has ID 0 at index 1"},
		"user before argument":  {func(g *Graph, x, y *Value) { g.Values[0], g.Values[1] = y, x; x.ID, y.ID = 1, 0 }, "comes after its user"},
		"argument not in graph": {func(g *Graph, x, y *Value) { y.Args[0] = &Value{Op: "input"} }, "argument 1 is not a value of this graph"},
		"nil value":             {func(g *Graph, x, y *Value) { g.Values[1] = nil }, "value 1 is nil"},
		"output elsewhere":      {func(g *Graph, x, y *Value) { g.Outputs[0].Value = &Value{Op: "relu"} }, "output y is not a value of this graph"},
		"output placement":      {func(g *Graph, x, y *Value) { g.Outputs[0].Placement = sbp.NdSBP{sbp.B, sbp.B} }, "does not fit the mesh"},
		"bad type":              {func(g *Graph, x, y *Value) { y.Type.DType = Invalid }, "invalid dtype"},
		"to changes the type": {func(g *Graph, x, y *Value) {
			y.Op, y.Type = "to", Type{DType: F32, Shape: []int{8, 4}}
		}, "to changes the type from f32[4, 8] to f32[8, 4]"},
		"gradient of a stranger": {func(g *Graph, x, y *Value) { y.Primal = &Value{Op: "relu"} }, "gradient of is not in this graph"},
		"loss not scalar":        {func(g *Graph, x, y *Value) { g.Train = &Train{Loss: y} }, "the loss is f32[4, 8], not a float scalar"},
		"loss elsewhere":         {func(g *Graph, x, y *Value) { g.Train = &Train{Loss: &Value{Op: "mse"}} }, "the loss is not a value of this graph"},
	} {
		t.Run(name, func(t *testing.T) {
			g, x, y := small(t)
			tc.breakIt(g, x, y)
			require.ErrorContains(t, Verify(g), tc.want)
		})
	}
}

// A train block's carried state keeps its type, and every value it names
// is in the graph.
func TestVerifyTrain(t *testing.T) {
	g, x, _ := small(t)
	b := NewBuilder(g)
	scalar := Type{DType: F32, Shape: []int{}}
	w, _ := b.Add(&Value{Op: "param", Type: scalar, Name: "w", Attrs: Attrs{Init: &Init{Kind: "zeros"}}})
	loss, _ := b.Add(&Value{Op: "mul", Type: scalar, Args: []*Value{w, w}})
	next, _ := b.Add(&Value{Op: "sub", Type: scalar, Args: []*Value{w, loss}})
	tr := &Train{Loss: loss, Params: []*Value{w}, Grads: map[*Value]*Value{w: loss}, Carry: []Carry{{Source: w, Next: next}}}
	g.Train = tr
	require.NoError(t, Verify(g))

	tr.Carry[0].Next = x
	require.ErrorContains(t, Verify(g), "w is f32[] but its next value is f32[4, 8]")
	tr.Carry[0].Next = next
	tr.Grads[w] = nil
	require.ErrorContains(t, Verify(g), "the gradient of w is not a value of this graph")
	tr.Grads[w] = loss
	tr.Hyper = map[string]*Value{"lr": {Op: "hyper"}}
	require.ErrorContains(t, Verify(g), "hyper lr is not a value of this graph")
}
