package planner

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedGPT is gptSource with every block naming layer 0's parameters
// (weights tied across layers, as ALBERT does).
func writeSharedGPT(t *testing.T, layers, batch int) *Program {
	src := gptSource(layers, batch)
	re := regexp.MustCompile(`x = block\(x, g\d+, c\d+, Wq\d+, Wk\d+, Wv\d+, Wo\d+, W1\d+, W2\d+\)`)
	src = re.ReplaceAllString(src, "x = block(x, g0, c0, Wq0, Wk0, Wv0, Wo0, W10, W20)")
	path := filepath.Join(t.TempDir(), "gpt.mesh")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	p, err := Load(path)
	require.NoError(t, err)
	return p
}

// Blocks that share one set of weights compose up to 17% off the exact
// step on 8 pipeline stages (the tied weights live on the first stage
// that reads them and every stage's gradient of them travels there), over
// the search's 5% tolerance: such statements must not fold.
func TestFoldSharedParametersNotRepeats(t *testing.T) {
	p := writeSharedGPT(t, 6, 8)
	require.Nil(t, p.fold(3), "tied weights are not repeats")
	// nor when the function every block calls reads one weight itself
	// (13% off on [pipeline pp=8, dp=2, tp=1] M=4 1f1b zero=3)
	require.Nil(t, writeCapturedGPT(t, 6, 8).fold(3), "a weight the blocks' function reads")
	// untied, the same program folds
	require.NotNil(t, writeGPT(t, 6, 8).fold(3))
}

// writeCapturedGPT is gptSource with the blocks' function reading layer
// 0's W2 itself (a global) instead of taking a W2 per layer.
func writeCapturedGPT(t *testing.T, layers, batch int) *Program {
	src := gptSource(layers, batch)
	src = regexp.MustCompile(`param W2[1-9]\d* : [^\n]*\n`).ReplaceAllString(src, "")
	src = strings.Replace(src, "def block(x, g, c, Wq, Wk, Wv, Wo, W1, W2) {", "def block(x, g, c, Wq, Wk, Wv, Wo, W1) {", 1)
	src = strings.Replace(src, "@ W1) @ W2\n", "@ W1) @ W20\n", 1)
	src = regexp.MustCompile(`, W2\d+\)`).ReplaceAllString(src, ")")
	path := filepath.Join(t.TempDir(), "gpt.mesh")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	p, err := Load(path)
	require.NoError(t, err)
	return p
}

// The search's report names every run of a fold, not only the first.
func TestFoldRunsText(t *testing.T) {
	one := &foldPlan{Runs: []foldRun{{Unit: 2, Count: 95}}}
	require.Equal(t, "a run of 96 repeated statements kept as 2", one.runsText())
	two := &foldPlan{Runs: []foldRun{{Unit: 2, Count: 3}, {Unit: 4, Count: 5}}}
	require.Equal(t, "runs of 4 and 6 repeated statements, each kept as 2", two.runsText())
}

// A candidate without a pipeline and more than four micro-batches is
// priced from the folded programs with three and four micro-batches: four
// lowerings, not also the two with all of its micro-batches (which the
// extrapolation in the micro-batch count is there to save).
func TestComposeFlatLowersOnlyFewMicroBatches(t *testing.T) {
	p := writeGPT(t, 6, 8)
	f := newFolded(p)
	require.NotNil(t, f)
	opts := Options{Devices: 4, Links: mustLinks(t, "4:1:300,*:10:25"), Rate: 400e12, Space: Space{MaxMicro: 8}}
	b, cands := feasible(t, p, opts)
	f.rows = b.rows
	for _, c := range cands {
		if c.PP != 1 || c.Micro != 8 {
			continue
		}
		_, err := f.compose(c, opts, b.dataName(p))
		require.NoError(t, err, c.Label(p))
		require.Equal(t, 4, f.lowered(), "%s: the folded programs with 3 and 4 micro-batches, two and three repeats each", c.Label(p))
		return
	}
	t.Fatal("no candidate without a pipeline and 8 micro-batches")
}
