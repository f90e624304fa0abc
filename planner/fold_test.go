package planner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/lang"
)

func loadText(t *testing.T, src string) *Program {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.mesh")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	p, err := Load(path)
	require.NoError(t, err)
	return p
}

// A run of repeated statements folds to three, its first, second and
// last; parameters only the dropped statements name go with them; the
// folded program checks; each unit maps to the folded unit with its
// computation, the middle ones to the second.
func TestFoldKeepsTheEndsAndOneMiddle(t *testing.T) {
	p := writeGPT(t, 5, 4)
	fp := p.fold(3)
	require.NotNil(t, fp)
	// units: embedding, 5 blocks, loss
	require.Equal(t, []int{0, 1, 2, 2, 2, 3, 4}, fp.Unit)
	require.Equal(t, 5, fp.Units)
	require.Equal(t, []foldRun{{Unit: 2, Count: 3}}, fp.Runs)
	src := string(fp.Source)
	for _, kept := range []string{"param Wq0 ", "param Wq1 ", "param Wq4 ", "param wte ", "param Wout ", "x = block(x, g1,", "x = block(x, g4,"} {
		require.Contains(t, src, kept)
	}
	for _, dropped := range []string{"param Wq2 ", "param W13 ", "x = block(x, g2,", "x = block(x, g3,"} {
		require.NotContains(t, src, dropped)
	}
	_, err := lang.CheckSource(p.Path, fp.Source, lang.CheckOptions{})
	require.NoError(t, err)
	four := p.fold(4)
	require.Equal(t, []int{0, 1, 2, 3, 3, 4, 5}, four.Unit)
	require.Equal(t, []foldRun{{Unit: 3, Count: 2}}, four.Runs)
	require.Nil(t, writeGPT(t, 3, 4).fold(3), "a run of three keeps all three")
}

// Statements fold only when their parameters are declared alike, and
// programs with loops or stage marks do not fold.
func TestFoldNeedsRepeats(t *testing.T) {
	base := `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param a : f32[4, 4] {B} = normal(0, 0.1)
param b : f32[4, 4] {B} = normal(0, 0.1)
param c : f32[4, 4] {B} = normal(0, 0.1)
param d : f32[4, 4] {B} = %s
param e : f32[4, 4] {B} = normal(0, 0.1)
train {
    h = x @ a
    h = h @ b
    h = h @ c
    h = h @ d
    h = h @ e
    loss = mean(h * h)
    optimizer = sgd(lr=0.1)
}
`
	require.NotNil(t, loadText(t, strings.Replace(base, "%s", "normal(0, 0.1)", 1)).fold(3))
	require.Nil(t, loadText(t, strings.Replace(base, "%s", "zeros", 1)).fold(3), "d is initialised differently")
	marked := strings.Replace(strings.Replace(base, "%s", "normal(0, 0.1)", 1), "    h = h @ b\n", "    h = h @ b\n    stage = 1\n", 1)
	require.Nil(t, loadText(t, marked).fold(3), "stage marks")
	looped := `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param a : f32[4, 4] {B} = normal(0, 0.1)
train {
    h = x
    for l in range(4) {
        h = h @ a
    }
    loss = mean(h * h)
    optimizer = sgd(lr=0.1)
}
`
	require.Nil(t, loadText(t, looped).fold(3), "a for loop")
}

// A parameter a dropped statement shares with a kept one stays declared.
func TestFoldKeepsSharedParameters(t *testing.T) {
	src := `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param a : f32[4, 4] {B} = normal(0, 0.1)
param b : f32[4, 4] {B} = normal(0, 0.1)
param c : f32[4, 4] {B} = normal(0, 0.1)
param d : f32[4, 4] {B} = normal(0, 0.1)
param e : f32[4, 4] {B} = normal(0, 0.1)
train {
    h = x @ a
    h = h @ b
    h = h @ c
    h = h @ d
    h = h @ e
    loss = mean((h @ d) * h)
    optimizer = sgd(lr=0.1)
}
`
	p := loadText(t, src)
	fp := p.fold(3)
	require.NotNil(t, fp)
	require.Contains(t, string(fp.Source), "param d ")
	require.NotContains(t, string(fp.Source), "h = h @ d\n")
	_, err := lang.CheckSource(p.Path, fp.Source, lang.CheckOptions{})
	require.NoError(t, err)
}
