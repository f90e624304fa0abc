package lower

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// unevenSource splits 6 rows over dp=4 and then tp=2, so blocks differ
// between devices and both axes' coordinates matter.
const unevenSource = `mesh M = [dp=4, tp=2]
input x : f32[6, 512] {S(0), S(0)} = normal(0, 1)
param W : f32[6, 512] {S(0), S(0)} = normal(0, 1)
train {
    loss = mean(x * W)
    optimizer = adam(lr=0.01)
}
`

// The memory pass shares one replay among ranks whose programs and
// block sizes agree, and explain sums the parameter, optimizer and
// gradient bytes once per pipeline rank when every block is even; both
// must give every device what its own walk gives.
func TestSharedPeaksAndHeldBytesMatchEachDevice(t *testing.T) {
	plans := testPlans(t)
	for name, p := range plans {
		held := heldByDevice(p)
		for r := range p.Peak {
			require.Equal(t, p.Exec.Peak(r), p.Peak[r], "%s rank %d", name, r)
			require.Equal(t, sumHeld(p, r), held(r), "%s rank %d", name, r)
		}
	}
	first := plans["uneven"].Peak[0]
	require.NotEqual(t, first, plans["uneven"].Peak[len(plans["uneven"].Peak)-1], "the uneven plan's ranks differ")
}

// distinctShapes walks only the coordinates that change a block; it must
// list what a walk over every device lists, in the same order.
func TestDistinctShapesMatchesAWalkOverEveryDevice(t *testing.T) {
	uneven := 0
	for name, p := range testPlans(t) {
		for _, v := range p.Values {
			pl := p.Placement[v]
			var want [][]int
			seen := map[string]bool{}
			for d := 0; d < p.Mesh.Size(); d++ {
				s := sbp.LocalShape(p.Mesh, v.Type.Shape, pl, d)
				if k := fmt.Sprint(s); !seen[k] {
					seen[k] = true
					want = append(want, s)
				}
			}
			require.Equal(t, want, distinctShapes(p, v.Type.Shape, pl), "%s %s %v", name, v.Label(), pl)
			if len(want) > 1 {
				uneven++
			}
		}
	}
	require.NotZero(t, uneven, "some value is split unevenly")
}

// testPlans are the examples' plans and one whose blocks differ between
// devices.
func testPlans(t *testing.T) map[string]*Plan {
	plans := map[string]*Plan{}
	for _, name := range examples(t) {
		plans[name] = compileExample(t, name)
	}
	g, err := lang.CheckSource("uneven.mesh", []byte(unevenSource), lang.CheckOptions{})
	require.NoError(t, err)
	plans["uneven"], err = Lower(g, Options{Verify: true})
	require.NoError(t, err)
	return plans
}

// descKey separates descriptions that differ in any field the rules read,
// including shapes that would print alike.
func TestDescKeySeparatesDescriptions(t *testing.T) {
	base := sbp.OpDesc{Op: "sum", In: [][]int{{4, 8}}, Out: []int{4}, Axis: 1, NumIn: 1}
	variants := []func(d *sbp.OpDesc){
		func(d *sbp.OpDesc) {},
		func(d *sbp.OpDesc) { d.Op = "max" },
		func(d *sbp.OpDesc) { d.Axis = 0 },
		func(d *sbp.OpDesc) { d.Axis = -1 },
		func(d *sbp.OpDesc) { d.NumIn = 2 },
		func(d *sbp.OpDesc) { d.Perm = []int{1, 0} },
		func(d *sbp.OpDesc) { d.In = [][]int{{48}} },
		func(d *sbp.OpDesc) { d.In = [][]int{{4}, {8}} },
		func(d *sbp.OpDesc) { d.Out = []int{4, 1} },
		func(d *sbp.OpDesc) { d.In, d.Out = [][]int{{4}}, []int{8, 4} },
	}
	seen := map[string]int{}
	for i, f := range variants {
		d := base
		f(&d)
		k := string(descKey(nil, &d))
		j, dup := seen[k]
		require.False(t, dup, "variants %d and %d share a key", j, i)
		seen[k] = i
	}
}

// choose prices each distinct (description, argument placements, dtypes,
// forward placement) once and hands later values the cached choice; every
// value must get what pricing it afresh gives. The pipelined GPT repeats
// its layers and micro-batches, so the cache is hit there.
func TestCachedChoicesMatchFreshPricing(t *testing.T) {
	plans := testPlans(t)
	var src bytes.Buffer
	gptsrc.Write(&src, 8, true) // a layer per stage
	g, err := lang.CheckSource("gpt.mesh", src.Bytes(), lang.CheckOptions{})
	require.NoError(t, err)
	plans["gpt pipelined"], err = Lower(g, Options{})
	require.NoError(t, err)
	for name, p := range plans {
		chosen := 0
		replayInfer(p, func(v *ir.Value) {
			ch := p.Choice[v]
			if ch == nil || v.Op == "to" || isLocalOp(v) {
				return // not priced: declared, or a local function's
			}
			chosen++
			rule, ok := sbp.Lookup(v.Op)
			require.True(t, ok)
			sigs, err := sbp.NdSigs(rule, Desc(v), p.Mesh)
			require.NoError(t, err)
			fresh, err := p.cheapest(v, sigs)
			require.NoError(t, err)
			require.Equal(t, fresh.Sig, ch.Sig, "%s %s", name, v.Label())
			require.Equal(t, fresh.Time, ch.Time, "%s %s", name, v.Label())
			require.Equal(t, fresh.Candidates, ch.Candidates, "%s %s", name, v.Label())
		})
		if name == "gpt pipelined" {
			require.Less(t, len(p.chosen), chosen/4, "the micro-batches' copies share choices")
		}
	}
}
