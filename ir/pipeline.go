package ir

import "github.com/meshrun/meshrun/mesh"

// Pipeline is a mesh axis that carries pipeline stages rather than a
// placement: Graph.Mesh is the declared mesh without it, every placement
// names the other axes, and each stage runs on one coordinate of it.
type Pipeline struct {
	Axis int        // its index in Full
	Full *mesh.Mesh // the mesh as declared
	Pos  Pos
}

// Size is the number of pipeline ranks (coordinates on the axis).
func (p *Pipeline) Size() int { return p.Full.Axes[p.Axis].Size }

// PipeTrain is how a train block runs on a pipeline: its schedule, and
// where the checker built each micro-batch and each unit of the block's
// body (a statement, or one iteration of a top-level for loop), so that
// lowering can give every value its stage.
type PipeTrain struct {
	Pos      Pos
	Schedule string // naive, gpipe, 1f1b, interleaved, zb1p, zbv
	V        int    // stages per pipeline rank (interleaved(v); 2 for zbv; else 1)
	// DefaultMicro says the micro-batch count is the default (one per
	// pipeline rank), not the block's.
	DefaultMicro bool
	// Micro holds, per micro-batch, the value IDs of its forward
	// [Start, Backward) and of its backward and gradient accumulation
	// [Backward, End).
	Micro []MicroRange
	// Units holds, per micro-batch, the value ID ranges of the body's units
	// in order (the same units for every micro-batch).
	Units [][]IDRange
	// UnitStage is the stage a unit was marked with (stage = N; -1 none).
	UnitStage []int
	// UnitPos is where each unit starts in the source.
	UnitPos []Pos
	// BackwardOf maps a value the backward built to the forward value whose
	// backward it belongs to (ad.Adjoints.For): it runs on that stage.
	BackwardOf map[*Value]*Value
}

// MicroRange is one micro-batch's values.
type MicroRange struct{ Start, Backward, End int }

// IDRange is the value IDs [Start, End).
type IDRange struct{ Start, End int }
