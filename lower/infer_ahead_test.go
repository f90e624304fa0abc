package lower

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// replayInfer walks p's values in infer's order with what infer knew
// when it placed each (the conversions earlier values asked for), calling
// at(v) before v's own are noted: a test can price v afresh as infer did.
func replayInfer(p *Plan, at func(v *ir.Value)) {
	p.made = make([][]sbp.NdSBP, len(p.Graph.Values))
	for _, v := range p.Values {
		at(v)
		p.noteConversions(v, p.choiceOf(v))
	}
}

// The training Megatron MLP gets Megatron's layout: over tp, one
// all-reduce of the row-parallel product, which the loss and its
// gradient then read replicated, and the gradient norm's scalar; nothing
// else crosses tp (greedy pricing without shared conversions and the
// loss's look-ahead reduce-scattered the product for the loss, kept the
// loss's gradient partial and all-reduced it, and reduced the loss over
// tp: four collectives).
func TestMegatronTrainingReducesTheProductOnce(t *testing.T) {
	p := compileExample(t, "train/megatron_dp_tp")
	tp := p.Mesh.AxisIndex("tp")
	var overTP []string
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			if s.Kind.Communicates() && s.Axis == tp {
				overTP = append(overTP, string(s.Kind)+" "+c.Value.Op)
			}
		}
	}
	require.Equal(t, []string{"all_reduce matmul", "all_reduce add"}, overTP)
}

// A partial value read by two ops is reduced once: gelu takes it
// reduce-scattered (cheaper than an all-reduce), and the subtraction,
// which could have kept it partial, reads the same reduced copy for free
// and so gives a split value, not a partial one that would need a second
// reduction.
func TestSharedConversionIsFree(t *testing.T) {
	p, err := lowerSource(`mesh M = [tp=2]
input x : f32[16, 8] {S(1)} = normal(0, 1)
input W : f32[8, 8] {S(0)} = normal(0, 1)
input t : f32[16, 8] {B} = normal(0, 1)
y = x @ W
a = gelu(y)
b = y - t
output a {B}
output b {B}
`)
	require.NoError(t, err)
	b := p.Values[len(p.Values)-1]
	require.Equal(t, "b", b.Name)
	require.Equal(t, "{S(0)}", p.Placement[b].String())
	var kinds []string
	for _, s := range collectives(p) {
		kinds = append(kinds, string(s.Kind))
	}
	require.Equal(t, []string{"reduce_scatter", "all_gather", "all_gather"}, kinds, "y reduced once; a and b gathered for their outputs")
}

// An output declared in a placement is priced where it is made: the sum
// of v over its dim split on r would be partial over r (an all-reduce,
// 2α) and split over c (a gather, α); gathering v over r first (α) leaves
// only the gather over c. Undeclared, the sum stays where it lies.
func TestOutputPlacementIsPricedWhereItIsMade(t *testing.T) {
	const src = `mesh M = [r=2, c=2]
input v : f32[8, 4] {S(0), S(1)} = normal(0, 1)
s = sum(v, axis=0)
output s%s
`
	p, err := lowerSource(fmt.Sprintf(src, " {B, B}"))
	require.NoError(t, err)
	for _, s := range collectives(p) {
		require.Equal(t, sbp.AllGather, s.Kind)
	}
	require.Len(t, collectives(p), 2)
	p, err = lowerSource(fmt.Sprintf(src, ""))
	require.NoError(t, err)
	require.Empty(t, collectives(p))
	require.Equal(t, "{P, S(0)}", p.Placement[p.Values[len(p.Values)-1]].String())
}

// The conversion of an output to its declared placement is made whoever
// else reads the value, and boxing shares it: a consumer asking for the
// same placement gets it for nothing. Here y (partial over tp) is
// all-reduced for its output; gelu reads that replicated copy (its own
// output then reaches {S(0)} by a local slice) rather than paying a
// reduce-scatter of its own: one collective, not two.
func TestOutputConversionIsShared(t *testing.T) {
	p, err := lowerSource(`mesh M = [tp=2]
input x : f32[16, 1024] {S(1)} = normal(0, 1)
input W : f32[1024, 8] {S(0)} = normal(0, 1)
y = x @ W
z = gelu(y)
output y {B}
output z {S(0)}
`)
	require.NoError(t, err)
	var kinds []string
	for _, s := range collectives(p) {
		kinds = append(kinds, string(s.Kind))
	}
	require.Equal(t, []string{"all_reduce"}, kinds)
	z := p.Values[len(p.Values)-1]
	require.Equal(t, "z", z.Name)
	require.Equal(t, "{B}", p.Placement[z].String())
}

// Under gradient accumulation a parameter's gradient is the sum of one
// contribution per micro-batch, reduced to the parameter's splits once
// per step, so a contribution is charged a quarter (here) of that
// reduction. Charged all of it, W3's contribution (16×32) all-reduced
// its operand h^T over tp in every micro-batch (10 us each) to come out
// split like W3, rather than reduce-scatter it (5 us) and leave the sum
// to one reduce-scatter per step (5 us): 40 us against 25 us. Over tp
// the step then all-reduces only the row-parallel product of each
// micro-batch and the loss.
func TestAccumulatedGradientIsReducedOncePerStep(t *testing.T) {
	p, err := lowerSource(`mesh M = [dp=2, tp=2]
input x  : f32[32, 16] {S(0), B} = normal(0, 1)
input t  : f32[32, 4]  {S(0), B} = normal(0, 1)
param W1 : f32[16, 64] {B, S(1)} = normal(0, 0.2)
param W2 : f32[64, 16] {B, S(0)} = normal(0, 0.2)
param W3 : f32[16, 64] {B, S(1)} = normal(0, 0.2)
param W4 : f32[64, 4]  {B, S(0)} = normal(0, 0.2)
train {
    h = gelu(x @ W1) @ W2
    loss = mse(gelu(h @ W3) @ W4, t)
    optimizer = adam(lr=0.005)
    accumulate = 4
    steps = 1
}
`)
	require.NoError(t, err)
	tp := p.Mesh.AxisIndex("tp")
	allReduces, w3 := 0, 0
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			if s.Axis != tp || !s.Kind.Communicates() {
				continue
			}
			if s.Kind == sbp.AllReduce {
				allReduces++
			}
			if c.Cause == "to W3.grad" {
				w3++
			}
		}
	}
	require.Equal(t, 4+1, allReduces, "the row-parallel product per micro-batch, the loss")
	require.Equal(t, 1, w3, "W3's summed gradient reduce-scattered once")
}
