package lower

import "github.com/meshrun/meshrun/ir"

// Hooks for package planner, which prices candidate strategies from
// lowered plans in explain's own terms.

// HeldBytes is what device d holds of the parameters, optimizer states and
// reduced gradients — the figures explain's memory table shows.
func HeldBytes(p *Plan, d int) (param, optimizer, gradient int64) {
	h := sumHeld(p, d)
	return h.param, h.optimizer, h.gradient
}

// LiveValues are the values of g that some output or carried value needs:
// those the check pass keeps, so the ones a plan executes.
func LiveValues(g *ir.Graph) []*ir.Value { return live(g, false) }
