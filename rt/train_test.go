package rt

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

func loadNpy(t *testing.T, path string) *Tensor {
	t.Helper()
	h, data, err := npy.ReadFile(path)
	require.NoError(t, err)
	return FromSlice(h.Shape, data)
}

// TestOptimizersMatchPyTorch trains the programs in testdata/golden/train
// (sgd, momentum, adam, adamw, custom betas, cosine schedule with warm-up
// and gradient clipping) on a dp=2 mesh and on one device, and compares
// every step's loss and the final parameters with torch.optim's run.
func TestOptimizersMatchPyTorch(t *testing.T) {
	files, err := filepath.Glob("../testdata/golden/train/*.mesh")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 6)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".mesh")
		dir := filepath.Dir(f)
		g, sources, err := lang.CheckFile(f, lang.CheckOptions{})
		require.NoError(t, err, lang.Render(err, sources))
		wantLoss := loadNpy(t, filepath.Join(dir, name+"_losses.npy"))
		for _, single := range []bool{false, true} {
			opts := lower.Options{Verify: true}
			if single {
				opts.Mesh = g.Mesh.Single()
			}
			p, err := lower.Lower(g, opts)
			require.NoError(t, err)
			res, err := Train(context.Background(), p, Options{}, TrainConfig{})
			require.NoError(t, err, name)
			d := CompareTensors(FromSlice([]int{len(res.Losses)}, res.Losses), wantLoss, 1e-10, 1e-12)
			require.True(t, d.OK, "%s (single %v): losses differ from PyTorch by %g\n got %v\nwant %v", name, single, d.MaxAbs, res.Losses, wantLoss.Data)
			for _, prm := range []string{"W", "c"} {
				d := CompareTensors(res.Param(prm), loadNpy(t, filepath.Join(dir, name+"_"+prm+".npy")), 1e-10, 1e-12)
				require.True(t, d.OK, "%s (single %v): final %s differs from PyTorch by %g", name, single, prm, d.MaxAbs)
			}
		}
	}
}

// A fed scalar on a rank's CPU comes from its arena and goes back to it
// when freed: a step's scalars allocate nothing once the arena holds
// them, and each holds the value fed, in the source's dtype.
func TestFedScalarsComeFromTheArena(t *testing.T) {
	c := NewRankCPU(DefaultBLAS())
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		first, err := fedScalar(c, dt, 0.25)
		require.NoError(t, err)
		ft := first.(*Tensor)
		require.Equal(t, dt, ft.DType)
		require.Equal(t, []float64{0.25}, ft.Float64s())
		c.Free(first)
		again, err := fedScalar(c, dt, 0.5)
		require.NoError(t, err)
		require.Same(t, ft, again.(*Tensor), "%s: the freed scalar is reused", dt)
		require.Equal(t, []float64{0.5}, again.(*Tensor).Float64s())
		c.Free(again)
		require.Zero(t, testing.AllocsPerRun(50, func() {
			b, _ := fedScalar(c, dt, 1e-3)
			c.Free(b)
		}), dt)
	}
	// a backend without an arena gets a tensor of its own, as before
	b, err := fedScalar(&CPU{}, ir.F32, 2)
	require.NoError(t, err)
	require.Equal(t, []float64{2}, b.(*Tensor).Float64s())
}

// A half-precision scalar is fed its value, rounded to the dtype: a
// program whose params and loss are bf16 or f16 (no precision setting)
// feeds its learning rate in that dtype, which setScalar left at zero,
// so that such a run trained nothing (its loss stayed where it began,
// on the mesh and on one device alike, and check passed).
func TestFedHalfScalarsHoldTheirValue(t *testing.T) {
	c := NewRankCPU(DefaultBLAS())
	for _, dt := range []ir.DType{ir.F16, ir.BF16} {
		for range 2 { // fresh, then from the arena
			b, err := fedScalar(c, dt, 0.1)
			require.NoError(t, err)
			require.Equal(t, dt, b.(*Tensor).DType)
			want := float64(F32ToF16(0.1))
			got := float64(b.(*Tensor).Data.([]uint16)[0])
			if dt == ir.BF16 {
				want = float64(F32ToBF16(0.1))
			}
			require.Equal(t, want, got, dt)
			c.Free(b)
		}
		b, err := fedScalar(&CPU{}, dt, 0.1)
		require.NoError(t, err)
		require.InDelta(t, 0.1, widen(b.(*Tensor)).Float64s()[0], 1e-3, dt)
	}
	for _, dt := range []string{"f16", "bf16"} {
		p := compile(t, strings.ReplaceAll(`mesh M = [dp=2]
input x : DT[8, 4] {S(0)} = normal(0, 1)
input t : DT[8, 2] {S(0)} = normal(0, 1)
param W : DT[4, 2] = normal(0, 0.3)
train {
    loss = mse(x @ W, t)
    optimizer = sgd(lr=0.1)
    steps = 5
}
`, "DT", dt))
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err, dt)
		require.Less(t, res.Losses[len(res.Losses)-1], res.Losses[0], "%s: the loss falls: %v", dt, res.Losses)
	}
}
