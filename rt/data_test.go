package rt

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

func trainSource(t *testing.T, src, dir string, single bool) *TrainResult {
	t.Helper()
	g, err := lang.CheckSource(filepath.Join(dir, "t.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err, lang.Render(err, map[string][]byte{filepath.Join(dir, "t.mesh"): []byte(src)}))
	opts := lower.Options{Verify: true}
	if single {
		opts.Mesh = g.Mesh.Single()
	}
	p, err := lower.Lower(g, opts)
	require.NoError(t, err)
	res, err := Train(context.Background(), p, Options{Seed: 5}, TrainConfig{})
	require.NoError(t, err)
	return res
}

const accSrc = `mesh M = [dp=2]
input x : f64[32, 6] {S(0)} = normal(0, 1)
input t : f64[32, 3] {S(0)} = normal(0, 1)
param W : f64[6, 3] {B} = normal(0, 0.3)
train {
    loss = mse(tanh(x @ W), t)
    optimizer = adam(lr=0.05)
    steps = 5
ACC}
`

// Gradient accumulation over strided micro-batches gives the full-batch
// step (the mean of equal micro-batch means is the batch mean).
func TestGradientAccumulationEqualsTheFullBatch(t *testing.T) {
	dir := t.TempDir()
	full := trainSource(t, strings.Replace(accSrc, "ACC", "", 1), dir, false)
	acc := trainSource(t, strings.Replace(accSrc, "ACC", "    accumulate = 4\n", 1), dir, false)
	d := CompareTensors(FromSlice([]int{5}, acc.Losses), FromSlice([]int{5}, full.Losses), 1e-12, 1e-12)
	require.True(t, d.OK, "%v vs %v", acc.Losses, full.Losses)
	d = CompareTensors(acc.Param("W"), full.Param("W"), 1e-12, 1e-12)
	require.True(t, d.OK, "W off by %g", d.MaxAbs)
}

// Batches drawn from a dataset: every epoch visits every row once, in an
// order fixed by the seed, different from epoch to epoch.
func TestDatasetBatchesCoverEachEpoch(t *testing.T) {
	dir := t.TempDir()
	rows := make([]float64, 12*2)
	for i := range rows {
		rows[i] = float64(i / 2) // row r holds r, r
	}
	require.NoError(t, npy.WriteFile(filepath.Join(dir, "d.npy"), []int{12, 2}, rows))
	src := "mesh M = [dp=2]\ninput x : f64[12, 2] {S(0)} = load(\"d.npy\")\nparam W : f64[2, 1] = ones\ntrain {\n loss = mean(x @ W)\n optimizer = sgd(lr=0.0)\n steps = 6\n batch = 4\n}\n"
	g, err := lang.CheckSource(filepath.Join(dir, "t.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err)
	bi := g.Train.Batches[0]
	cache := &npyCache{}
	epoch := func(first int, seed uint64) []float64 {
		var seen []float64
		for s := first; s < first+3; s++ {
			b, err := batchFor(bi, s, seed, cache)
			require.NoError(t, err)
			v := b.Float64s()
			for r := 0; r < 4; r++ {
				require.Equal(t, v[2*r], v[2*r+1], "rows stay whole")
				seen = append(seen, v[2*r])
			}
		}
		return seen
	}
	e1, e2 := epoch(1, 1), epoch(4, 1)
	require.NotEqual(t, e1, e2, "each epoch is shuffled anew")
	require.Equal(t, e1, epoch(1, 1), "the order is a function of the seed")
	for _, e := range [][]float64{e1, e2} {
		s := append([]float64{}, e...)
		sort.Float64s(s)
		require.Equal(t, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, s)
	}
	// the loss of each step is the mean of its batch's rows times 2
	res := trainSource(t, src, dir, false) // seed 5
	order := append(epoch(1, 5), epoch(4, 5)...)
	for i, l := range res.Losses {
		want := 0.0
		for _, r := range order[4*i : 4*i+4] {
			want += 2 * r / 4
		}
		require.InDelta(t, want, l, 1e-12, "step %d", i+1)
	}
}

// A random initialiser with batch = B is an endless stream: fresh rows
// every step, identical on every mesh.
func TestSyntheticStreamIsMeshIndependent(t *testing.T) {
	src := strings.Replace(accSrc, "ACC", "    batch = 8\n", 1)
	dir := t.TempDir()
	mesh := trainSource(t, src, dir, false)
	one := trainSource(t, src, dir, true)
	d := CompareTensors(FromSlice([]int{5}, mesh.Losses), FromSlice([]int{5}, one.Losses), 1e-12, 1e-12)
	require.True(t, d.OK)
	require.NotEqual(t, mesh.Losses[0], mesh.Losses[1])
}
