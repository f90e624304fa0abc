package lower

import (
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
)

// Hooks for package planner, which prices candidate strategies from
// lowered plans in explain's own terms.

// HeldBytes is what device d holds of the parameters, optimizer states and
// reduced gradients — the figures explain's memory table shows.
func HeldBytes(p *Plan, d int) (param, optimizer, gradient int64) {
	h := sumHeld(p, d)
	return h.param, h.optimizer, h.gradient
}

// LiveValues are the values of g that some output or carried value needs:
// those the check pass keeps, so the ones a plan executes. g's value IDs
// are their indices, as lang.Check's are.
func LiveValues(g *ir.Graph) []*ir.Value { return live(g, false) }

// UnitCosts models each unit of g's train block (micro-batch 0) as the
// pipeline pass does when it cuts stages: the seconds of its forward and
// backward FLOPs at ModelFLOPS, and the bytes a cut after it sends.
// g must have been checked with a pipeline axis (its units recorded).
func UnitCosts(g *ir.Graph) (compute, sent []float64) {
	cost := newUnitWork(g).costs(func(b float64) float64 { return b })
	n := len(g.Train.Pipe.Units[0])
	compute, sent = make([]float64, n), make([]float64, n)
	for u := range n {
		compute[u], sent[u] = cost(u)
	}
	return compute, sent
}

// BalanceUnits cuts units of the given costs into k stages as the
// pipeline pass does without stage marks (sends timed on the default
// link): each unit's stage.
func BalanceUnits(compute, sent []float64, k int) []int {
	link := mesh.DefaultLink
	return balance(len(compute), k, func(u int) (float64, float64) { return compute[u], link.Alpha + sent[u]*link.Beta })
}
