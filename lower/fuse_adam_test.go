package lower

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// countAdam counts a plan's fused Adam instructions and separate Adam ops.
func countAdam(p *Plan) (fused, parts int) {
	for _, prog := range p.Exec.Programs {
		for _, in := range prog.Instrs {
			if in.Kind != plan.Compute {
				continue
			}
			switch in.Kernel.Op {
			case "adam_fused":
				fused++
			case "adam_moment", "adam_moment2", "adam_update":
				parts++
			}
		}
	}
	return fused, parts
}

// TestFuseAdamNeverGrowsAPeak: on every shipped training example, no
// rank's device or host peak in the fused plan is above the unfused
// plan's (lower.Options.NoFuseAdam); each update is either fused whole or
// left whole; the transformer on its 2-D mesh, whose activations are its
// peak, and the data-parallel MLP, whose peak is its optimizer step
// (fused only when its results are written over p, m, v: buffer
// donation), have every update fused; and the fused plan verifies.
func TestFuseAdamNeverGrowsAPeak(t *testing.T) {
	files, err := filepath.Glob("../examples/train/*.mesh")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		g, _, err := lang.CheckFile(f, lang.CheckOptions{})
		require.NoError(t, err, f)
		fp, err := Lower(g, Options{Verify: true})
		require.NoError(t, err, f)
		pp, err := Lower(g, Options{NoFuseAdam: true})
		require.NoError(t, err, f)
		for r := range pp.Peak {
			require.LessOrEqual(t, fp.Peak[r], pp.Peak[r], "%s: rank %d", f, r)
			require.LessOrEqual(t, fp.Exec.HostPeak(r), pp.Exec.HostPeak(r), "%s: rank %d's host tier", f, r)
		}
		fused, parts := countAdam(fp)
		_, all := countAdam(pp)
		require.Equal(t, all, 3*fused+parts, "%s: whole updates", f)
		switch filepath.Base(f) {
		case "transformer_2d.mesh":
			require.Zero(t, parts, f)
			require.Positive(t, fused, f)
		case "mlp_dp.mesh":
			require.Zero(t, parts, f)
			require.Positive(t, fused, f)
		}
		t.Logf("%s: %d of %d updates fused", filepath.Base(f), fused, fused+parts/3)
	}
}

// bigPeak is a product larger than any update (output w), so that a
// fused update grows no peak.
const bigPeak = "input a : f32[128, 128] = normal(0, 1)\nw = sum(a @ a)\noutput w\n"

// TestFuseAdamLeavesWhatItMustNot: an update whose first moment another
// op reads before it, whose moments read different gradients, or in
// bf16, stays three ops; one whose moments only the update reads fuses.
func TestFuseAdamLeavesWhatItMustNot(t *testing.T) {
	head := "mesh M = [x=2]\ninput p : f32[64, 8] = normal(0, 1)\ninput m : f32[64, 8] = normal(0, 1)\ninput v : f32[64, 8] = uniform(0, 1)\n" +
		"input g : f32[64, 8] = normal(0, 1)\ninput h : f32[64, 8] = normal(0, 1)\ninput s : f32[] = uniform(0.1, 0.2)\n" + bigPeak
	for _, c := range []struct {
		body  string
		fused int
	}{
		{"y = adam_update(p, adam_moment(m, g, 0.9), adam_moment2(v, g, 0.99), s, 0.9, 0.00000001, 0.99)\noutput y\n", 1},
		{"nm = adam_moment(m, g, 0.9)\nz = nm * 2\ny = adam_update(p, nm, adam_moment2(v, g, 0.99), s, 0.9, 0.00000001, 0.99)\noutput y\noutput z\n", 0},
		{"y = adam_update(p, adam_moment(m, g, 0.9), adam_moment2(v, h, 0.99), s, 0.9, 0.00000001, 0.99)\noutput y\n", 0},
		{"y = adam_update(cast(p, \"bf16\"), adam_moment(cast(m, \"bf16\"), cast(g, \"bf16\"), 0.9), adam_moment2(cast(v, \"bf16\"), cast(g, \"bf16\"), 0.99), cast(s, \"bf16\"), 0.9, 0.00000001, 0.99)\noutput y\n", 0},
	} {
		p := lowerFuse(t, head+c.body, Options{})
		fused, _ := countAdam(p)
		require.Equal(t, c.fused, fused, "%s", c.body)
	}
}

// TestFuseAdamVerifierCatchesABadInstruction: the verifier rejects an
// adam_fused whose gradient is read under another placement than its
// results, or that writes p' over m; and the plan's a further result in
// a slot already written.
func TestFuseAdamVerifierCatchesABadInstruction(t *testing.T) {
	src := "mesh M = [x=2]\ninput p : f32[64, 8] = normal(0, 1)\ninput m : f32[64, 8] = normal(0, 1)\ninput v : f32[64, 8] = uniform(0, 1)\n" +
		"input g : f32[64, 8] = normal(0, 1)\ninput s : f32[] = uniform(0.1, 0.2)\n" + bigPeak +
		"y = adam_update(p, adam_moment(m, g, 0.9), adam_moment2(v, g, 0.99), s, 0.9, 0.00000001, 0.99)\noutput y\n"
	for _, breakIt := range []func(in *plan.Instr){
		func(in *plan.Instr) { in.ArgPlace = slices.Clone(in.ArgPlace); in.ArgPlace[3] = sbp.NdSBP{sbp.P} },
		func(in *plan.Instr) { in.Outs = []int{in.Outs[0], in.Outs[0]} },
		func(in *plan.Instr) { in.Donate = []int{1, 0, 2} }, // p' over m: the same block, not its own
	} {
		p := lowerFuse(t, src, Options{})
		require.NoError(t, Verify(p))
		hit := false
		for i := range p.Exec.Programs[0].Instrs {
			if in := &p.Exec.Programs[0].Instrs[i]; in.Kind == plan.Compute && in.Kernel.Op == "adam_fused" {
				breakIt(in)
				hit = true
			}
		}
		require.True(t, hit)
		require.Error(t, Verify(p))
	}
}

// benchMLP is bench/torch_mlp.sh's MLP (x @ W1 → gelu → @ W2, MSE,
// Adam) on mesh with the batch placed as batch, initialised in place of
// the script's files.
func benchMLP(mesh, batch string) string {
	return "mesh M = [" + mesh + "]\ninput x : f32[256, 512] " + batch + " = normal(0, 1)\ninput t : f32[256, 512] " + batch + " = normal(0, 1)\n" +
		"param W1 : f32[512, 1024] = normal(0, 0.04)\nparam W2 : f32[1024, 512] = normal(0, 0.03)\n" +
		"train {\n    loss = mse(gelu(x @ W1) @ W2, t)\n    optimizer = adam(lr=0.001)\n    steps = 12\n}\n"
}

// TestFuseAdamDonatesOnTheMLP: on the benchmark's MLP, one device and
// data-parallel, whose peak is its optimizer step, both updates are
// fused (the pass before donation fused neither: seven blocks at once),
// each writing p', m', v' over p, m, v, which the dump and explain say;
// the peak falls by exactly a block (2 MiB: the three ops held p, m', v,
// v' and g at the second moment, five blocks, the fused instruction four;
// the moments' β constants, made once for both parameters, live until the
// last update in either plan); and a ZeRO-1 and an f16 variant, whose
// windows hold more than the three ops (the slice of p; the old p, m, v
// kept for a skipped step), are fused where the whole program's replay
// shows no peak grows.
func TestFuseAdamDonatesOnTheMLP(t *testing.T) {
	for _, c := range []struct{ mesh, batch string }{{"dp=1", ""}, {"dp=2", "{S(0)}"}} {
		src := benchMLP(c.mesh, c.batch)
		fp := lowerFuse(t, src, Options{})
		pp := lowerFuse(t, src, Options{NoFuseAdam: true})
		fused, parts := countAdam(fp)
		require.Equal(t, 2, fused, c.mesh)
		require.Zero(t, parts, c.mesh)
		for _, in := range fp.Exec.Programs[0].Instrs {
			if in.Kind == plan.Compute && in.Kernel.Op == "adam_fused" {
				require.Equal(t, []int{0, 1, 2}, in.Donate, c.mesh)
			}
		}
		require.Contains(t, fp.Exec.Dump(), "donate[", c.mesh)
		require.Contains(t, Explain(fp).Text(), "Adam updates fused into one pass: 2 of 2; results written over dying arguments (buffer donation, no new block): 2", c.mesh)
		require.Equal(t, pp.Peak[0]-512*1024*4, fp.Peak[0], c.mesh)
	}
	for _, extra := range []string{"    precision = f16\n"} {
		src := strings.Replace(benchMLP("dp=2", "{S(0)}"), "    steps = 12\n", "    steps = 12\n    data_axis = dp\n"+extra, 1)
		fp := lowerFuse(t, src, Options{})
		pp := lowerFuse(t, src, Options{NoFuseAdam: true})
		fused, _ := countAdam(fp)
		require.Positive(t, fused, extra)
		for r := range pp.Peak {
			require.LessOrEqual(t, fp.Peak[r], pp.Peak[r], extra)
		}
	}
}

// TestNoDonationOfSharedBuffers: the fused update donates p, m and v
// only where the runtime would write over them; a slot a send reads, or
// a recv's or a collective's result, keeps its buffer (the plan counts
// that result fresh, as the rank holds it). A small program by hand: p
// received, m sent to a peer, v a source.
func TestNoDonationOfSharedBuffers(t *testing.T) {
	src := func(out int) plan.Instr { return plan.Instr{Kind: plan.Source, Out: out} }
	prog := &plan.Program{Instrs: []plan.Instr{
		{Kind: plan.Recv, Out: 0}, // p
		src(1),                    // m
		{Kind: plan.Send, Args: []int{1}, Out: -1}, // m to a peer
		src(2), src(3), src(4), // v, g, a scalar
		{Kind: plan.Compute, Args: []int{1, 3, 4}, Out: 5, Free: []int{1}}, // adam_moment
		{Kind: plan.Compute, Args: []int{2, 3, 4}, Out: 6, Free: []int{2, 3}},
		{Kind: plan.Compute, Args: []int{0, 5, 6, 4, 4, 4, 4}, Out: 7, Free: []int{0, 4, 5, 6}},
	}, SlotType: make([]ir.DType, 8)}
	shared := sharedSlots(prog)
	require.Equal(t, []bool{true, true, false, false, false, false, false, false}, shared)
	require.Equal(t, []int{-1, -1, 2}, donations(prog, 6, 7, 8, shared), "only v's buffer")
	require.Equal(t, []int{0, 1, 2}, donations(prog, 6, 7, 8, make([]bool, 8)), "each dies there")
}
