package rt

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// Helpers of local_bytes_test.go and local_memory_test.go: compile, train
// one step, and attribute every byte each device sent.

const f32 = 4 // bytes per element of every program here

// comms is one trained step's bytes per device, split by what sent them.
type comms struct {
	fwd, bwd []int64 // collectives written in local functions
	// bwdBy splits bwd by the collective (autodiff's transposes: "reduce",
	// "all_reduce", …).
	bwdBy map[string][]int64
	// insertedBy lists, per device, the conversions the compiler inserted
	// that sent something ("all_reduce(train.loss)") and their bytes.
	insertedBy [][]sent
}

type sent struct {
	name  string
	bytes int64
}

var writtenOps = map[string]bool{"all_reduce": true, "all_gather": true, "reduce_scatter": true,
	"all_to_all": true, "broadcast": true, "reduce": true, "shift": true}

// isWritten reports whether instruction i emits a collective a local
// function wrote (or autodiff's transpose of one): the value it serves is
// that collective. A conversion for a local collective's argument cannot
// occur (local values are never boxed).
func isWritten(p *lower.Plan, i int) bool {
	v := p.InstrValue[i]
	return v != nil && v.Local && writtenOps[v.Op] && p.Exec.Programs[0].Instrs[i].Kind.Communicates()
}

func compileLocal(t *testing.T, src string) *lower.Plan {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	require.Len(t, p.Exec.Programs, 1, "one program for every rank")
	return p
}

// trainOnce trains the model one step and splits what each device sent.
func trainOnce(t *testing.T, mesh, decls, loss string) (*lower.Plan, comms) {
	t.Helper()
	src := fmt.Sprintf("mesh M = %s\nuse par\n%s\ntrain {\n    loss = %s\n    optimizer = sgd(lr=0.1)\n    steps = 1\n}\n", mesh, decls, loss)
	p := compileLocal(t, src)
	r, err := Train(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}}, TrainConfig{})
	require.NoError(t, err)
	return p, split(t, p, r.Last)
}

// split attributes every device's measured bytes, instruction by
// instruction, and checks explain's written collectives against them.
func split(t *testing.T, p *lower.Plan, res *Result) comms {
	t.Helper()
	prog := p.Exec.Programs[0]
	n := len(res.Devices)
	c := comms{fwd: make([]int64, n), bwd: make([]int64, n), bwdBy: map[string][]int64{}, insertedBy: make([][]sent, n)}
	per := make([][]int64, n) // per device, per instruction
	for d, st := range res.Devices {
		var evs []Event
		for _, e := range st.Events {
			if e.Kind != "ring" { // a ring collective's steps, inside its instruction's event
				evs = append(evs, e)
			}
		}
		require.Len(t, evs, len(prog.Instrs), "device %d: one event per instruction", d)
		per[d] = make([]int64, len(evs))
		var total int64
		for i, e := range evs {
			per[d][i] = e.Bytes
			total += e.Bytes
			switch {
			case e.Bytes == 0:
			case isWritten(p, i) && p.InstrValue[i].Backward:
				c.bwd[d] += e.Bytes
				op := p.InstrValue[i].Op
				if c.bwdBy[op] == nil {
					c.bwdBy[op] = make([]int64, n)
				}
				c.bwdBy[op][d] += e.Bytes
			case isWritten(p, i):
				c.fwd[d] += e.Bytes
			default:
				c.insertedBy[d] = append(c.insertedBy[d], sent{e.Name, e.Bytes})
			}
		}
		require.Equal(t, st.BytesSent, total, "device %d: the events account for every byte sent", d)
	}
	checkWritten(t, p, per)
	return c
}

// checkWritten walks explain's written collectives with the instructions
// that emit them (the same order: values in plan order, a collective's
// single-axis steps in turn, a shift's send and receive as one entry).
func checkWritten(t *testing.T, p *lower.Plan, per [][]int64) {
	t.Helper()
	prog := p.Exec.Programs[0]
	ws := lower.Explain(p).Written
	k := 0
	for i, in := range prog.Instrs {
		if !isWritten(p, i) {
			continue
		}
		var most int64
		for d := range per {
			most = max(most, per[d][i])
		}
		if in.Kind == plan.Recv {
			require.Zero(t, most, "%s: a receive sends nothing", in.Name())
			continue
		}
		require.Less(t, k, len(ws), "explain lists %d written collectives; %s is not among them", len(ws), in.Name())
		w := ws[k]
		k++
		kind := "shift"
		if in.Kind == plan.Collective {
			kind = string(in.Step.Kind)
		}
		require.Equal(t, in.Label, w.Value, "written collective %d", w.Index)
		require.Equal(t, kind, w.Kind, "written collective %d (%s)", w.Index, w.Value)
		require.Equal(t, float64(most), w.Bytes, "written collective %d (%s %s over %s at %s): explain's bytes vs the busiest device's, measured",
			w.Index, w.Kind, w.Value, w.Axis, w.Where)
	}
	require.Equal(t, len(ws), k, "every written collective explain lists is run")
}

// requirePerRank compares a per-device figure with a formula of the rank.
func requirePerRank(t *testing.T, what string, got []int64, want func(r int) int64) {
	t.Helper()
	for r, g := range got {
		require.Equal(t, want(r), g, "%s, rank %d", what, r)
	}
}

const lossReduce = "all_reduce(train.loss)"

// forLoss names, as the runtime's events do (kind(value)), the
// conversions explain lists as the loss's: for an op of the loss's
// statement or for the loss output. The loss is reduced either as a
// partial scalar or by gathering what it is computed from, whichever the
// cost model prices lower (lower/infer_ahead.go): on these small shapes
// often the gather. A conversion into a local function called on that
// line (cause to_local) is the model's, not the loss's.
func forLoss(p *lower.Plan) map[string][]lower.CollectiveReport {
	out := map[string][]lower.CollectiveReport{}
	for _, cr := range lower.Explain(p).Collectives {
		if cr.Cause == "output loss" || strings.HasPrefix(cr.Source, "loss =") && cr.Cause != "to_local" {
			name := cr.Kind + "(" + cr.Value + ")"
			out[name] = append(out[name], cr)
		}
	}
	return out
}

// forLoss leaves out what the loss's line converts for the model: here X,
// split over t, gathered into par.linear_col (which takes it replicated)
// on the loss's line, is the model's conversion, not the loss's; the
// gather of the function's output for mse is the loss's.
func TestForLossLeavesTheModelsConversions(t *testing.T) {
	p := compileLocal(t, "mesh M = [t=3]\nuse par\nparam X : f32[6, 6] {t: S(0)} = normal(0, 1)\nparam W : f32[6, 9] {t: S(1)} = normal(0, 0.3)\n"+
		"input T : f32[6, 9] = normal(0, 1)\ntrain {\n    loss = mse(par.linear_col(X, W), T)\n    optimizer = sgd(lr=0.1)\n    steps = 1\n}\n")
	var gathers []string
	for _, cr := range lower.Explain(p).Collectives {
		if cr.Kind == "all_gather" {
			gathers = append(gathers, cr.Value+" for "+cr.Cause)
		}
	}
	require.ElementsMatch(t, []string{"X for to_local", "from_local#7 for mse"}, gathers, "the program's gathers")
	loss := forLoss(p)
	require.NotContains(t, loss, "all_gather(X)")
	require.Contains(t, loss, "all_gather(from_local#7)")
}

// requireOnlyLoss checks that the only communication the compiler inserted
// is the loss's (forLoss), each conversion sending on the busiest device
// what explain says (the scalar loss's all-reduce too: a ring cuts it
// into p balanced chunks, one of one element and p−1 empty, so a rank
// sends it at most once in each half).
func requireOnlyLoss(t *testing.T, p *lower.Plan, c comms) {
	t.Helper()
	loss := forLoss(p)
	most := map[string]int64{}
	for d, ins := range c.insertedBy {
		per := map[string]int64{}
		for _, s := range ins {
			require.Contains(t, loss, s.name, "device %d: an inserted conversion besides the loss's", d)
			per[s.name] += s.bytes
		}
		for name, b := range per {
			most[name] = max(most[name], b)
		}
	}
	for name, b := range most {
		if name == lossReduce {
			require.LessOrEqual(t, b, int64(2*f32), "the loss's all-reduce")
		}
		var listed float64
		for _, cr := range loss[name] {
			listed += cr.Bytes
		}
		require.Equal(t, listed, float64(b), "%s: explain's bytes vs the busiest device's, measured", name)
	}
}

// algoSent is algo's figure of a pass, per rank (the runtime's mesh and
// algo's list the same roles in the same order, so the ranks agree).
func algoSent(costs []*algo.Cost, pass algo.Pass) func(r int) int64 {
	return func(r int) int64 { return costs[r].Sent(pass) }
}

// children is how many members the member at distance v from the root
// sends to in a binomial-tree broadcast over p (notes: lg p rounds).
func children(v, p int) int {
	n := 0
	for s := 1; s < p; s <<= 1 {
		if v&s != 0 {
			break
		}
		if v+s < p {
			n++
		}
	}
	return n
}

// ceilLg is ⌈lg p⌉.
func ceilLg(p int) int { return bits.Len(uint(p - 1)) }
