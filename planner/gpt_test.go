package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gptSource writes a GPT of realistic widths (h = 2048, 16 heads, 1024
// tokens, a 32768-token vocabulary) with Megatron placements on a
// [dp, tp] mesh, its shapes written with -1 for the batch so that any
// micro-batch count checks.
func gptSource(layers, batch int) string {
	const h, heads, seq, ffn, vocab = 2048, 16, 1024, 8192, 32768
	var b strings.Builder
	fmt.Fprintf(&b, "mesh M = [dp=2, tp=2]\n\n")
	fmt.Fprintf(&b, "input tok : i64[%d, %d] {S(0), B} = uniform(0, %d)\n", batch, seq, vocab)
	fmt.Fprintf(&b, "input tgt : i64[%d, %d] {S(0), B} = uniform(0, %d)\n", batch, seq, vocab)
	fmt.Fprintf(&b, "input mask : f32[%d, %d] = causal\n", seq, seq)
	fmt.Fprintf(&b, "param wte : f32[%d, %d] {B, B} = normal(0, 0.02)\n", vocab, h)
	for l := range layers {
		for _, n := range []string{"Wq", "Wk", "Wv"} {
			fmt.Fprintf(&b, "param %s%d : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n", n, l, h, h)
		}
		fmt.Fprintf(&b, "param Wo%d : f32[%d, %d] {B, S(0)} = normal(0, 0.02)\n", l, h, h)
		fmt.Fprintf(&b, "param W1%d : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n", l, h, ffn)
		fmt.Fprintf(&b, "param W2%d : f32[%d, %d] {B, S(0)} = normal(0, 0.02)\n", l, ffn, h)
		fmt.Fprintf(&b, "param g%d : f32[%d] {B, B} = ones\nparam c%d : f32[%d] {B, B} = zeros\n", l, h, l, h)
	}
	fmt.Fprintf(&b, "param Wout : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n\n", h, vocab)
	fmt.Fprintf(&b, `def heads(t) {
    return permute(reshape(t, -1, %d, %d, %d), 0, 2, 1, 3)
}
def merge(t) {
    return reshape(permute(t, 0, 2, 1, 3), -1, %d, %d)
}
def block(x, g, c, Wq, Wk, Wv, Wo, W1, W2) {
    n = layernorm(x, g, c)
    a = softmax((heads(n @ Wq) @ transpose(heads(n @ Wk))) * 0.0884 + mask, axis=-1) @ heads(n @ Wv)
    h = x + merge(a) @ Wo
    return h + gelu(layernorm(h, g, c) @ W1) @ W2
}
train {
    x = embedding(wte, tok)
`, seq, heads, h/heads, seq, h)
	for l := range layers {
		fmt.Fprintf(&b, "    x = block(x, g%d, c%d, Wq%d, Wk%d, Wv%d, Wo%d, W1%d, W2%d)\n", l, l, l, l, l, l, l, l)
	}
	fmt.Fprintf(&b, "    loss = cross_entropy(reshape(x @ Wout, -1, %d), reshape(tgt, -1))\n", vocab)
	fmt.Fprintf(&b, "    optimizer = adam(lr=0.0001)\n    precision = bf16\n    batch = %d\n}\n", batch)
	return b.String()
}

func writeGPT(t *testing.T, layers, batch int) *Program {
	path := filepath.Join(t.TempDir(), "gpt.mesh")
	require.NoError(t, os.WriteFile(path, []byte(gptSource(layers, batch)), 0o644))
	p, err := Load(path)
	require.NoError(t, err)
	return p
}

// axisSize is a's size in c's mesh, the pipeline axis as "pp".
func axisSize(p *Program, c *Candidate, a string) int {
	if a == p.PipeName {
		return c.PP
	}
	for i, n := range p.Axes {
		if n == a {
			return c.Sizes[i]
		}
	}
	return 0
}

// On 16 devices, 8 per node on fast links and the two nodes on a slow
// network, the planner puts Megatron tensor parallelism inside a node
// (tp on the fast links) and only data or pipeline parallelism across
// nodes; under a memory budget that the best strategy without ZeRO
// cannot meet as fast, it shards with ZeRO.
func TestGPTRecoversKnownLayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("prices hundreds of candidates")
	}
	p := writeGPT(t, 2, 4)
	links := mustLinks(t, "8:1:300,*:10:25")
	space := Space{Schedules: []string{"1f1b", "zb1p"}, MaxMicro: 4}
	res, err := Search(p, Options{Devices: 16, Links: links, Top: 3, Space: space})
	require.NoError(t, err)
	require.NotEmpty(t, res.Ranked, res.Text())
	t.Log(res.Text())
	best := res.Ranked[0]
	full := best.Cand.fullSizes()
	names := slices.Clone(p.Axes)
	if best.Cand.PP > 1 {
		names = slices.Insert(names, best.Cand.PPPos, p.PipeName)
	}
	require.Greater(t, axisSize(p, best.Cand, "tp"), 1, "tensor parallel: %s", best.Label)
	for a, n := range full {
		_, level := links.Axis(full, a)
		if names[a] == "tp" {
			require.Zero(t, level, "tp on the fast links: %s", best.Label)
		}
		if n > 1 && level > 0 {
			require.Contains(t, []string{"dp", "pp"}, names[a], "only dp or pp across nodes: %s", best.Label)
		}
	}

	// A budget under the peak of the best strategy without ZeRO: without
	// ZeRO to choose from, the best that fits is slower than with it.
	plain, err := Search(p, Options{Devices: 16, Links: links, Top: 1, Space: Space{Schedules: space.Schedules, MaxMicro: 4, Zero: []int{0}}})
	require.NoError(t, err)
	budget := plain.Ranked[0].Cost.Peak * 3 / 4
	noZero, err := Search(p, Options{Devices: 16, Links: links, Top: 1, Memory: budget, Space: Space{Schedules: space.Schedules, MaxMicro: 4, Zero: []int{0}}})
	require.NoError(t, err)
	zero, err := Search(p, Options{Devices: 16, Links: links, Top: 1, Memory: budget, Space: space})
	require.NoError(t, err)
	require.NotEmpty(t, zero.Ranked, zero.Text())
	t.Log(zero.Text())
	require.Positive(t, zero.Ranked[0].Cand.Zero, "ZeRO when memory binds: %s", zero.Ranked[0].Label)
	require.LessOrEqual(t, zero.Ranked[0].Cost.Peak, budget)
	if len(noZero.Ranked) > 0 {
		require.Less(t, zero.Ranked[0].Cost.Step, noZero.Ranked[0].Cost.Step, "without ZeRO: %s", noZero.Ranked[0].Label)
	}
}

func tpIndex(p *Program, c *Candidate) int {
	i := 0
	for i < len(p.Axes) && p.Axes[i] != "tp" {
		i++
	}
	if c.PP > 1 && i >= c.PPPos {
		i++
	}
	return i
}

func TestWriteGPTForManualRuns(t *testing.T) {
	if os.Getenv("PLANNER_GPT_OUT") == "" {
		t.Skip("set PLANNER_GPT_OUT to write the test GPT")
	}
	layers, batch := 4, 4
	if n, err := strconv.Atoi(os.Getenv("PLANNER_GPT_LAYERS")); err == nil {
		layers = n
	}
	if n, err := strconv.Atoi(os.Getenv("PLANNER_GPT_BATCH")); err == nil {
		batch = n
	}
	require.NoError(t, os.WriteFile(os.Getenv("PLANNER_GPT_OUT"), []byte(gptSource(layers, batch)), 0o644))
}
