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

// TestGoldenOps runs every program in testdata/golden (written by gen.py
// from PyTorch, an independent implementation) on its sharded mesh and on
// one device, and compares both with PyTorch's result.
func TestGoldenOps(t *testing.T) {
	files, err := filepath.Glob("../testdata/golden/*.mesh")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 30)
	ctx := context.Background()
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".mesh")
		g, sources, err := lang.CheckFile(f, lang.CheckOptions{})
		require.NoError(t, err, lang.Render(err, sources))
		h, data, err := npy.ReadFile(filepath.Join(filepath.Dir(f), name+"_out_y.npy"))
		require.NoError(t, err)
		want := FromSlice(h.Shape, data)
		rtol, atol := 1e-10, 1e-12
		if want.DType == ir.F32 {
			rtol, atol = 2e-5, 2e-6
		}
		for _, single := range []bool{false, true} {
			opts := lower.Options{Verify: true}
			if single {
				opts.Mesh = g.Mesh.Single()
			}
			p, err := lower.Lower(g, opts)
			require.NoError(t, err, name)
			res, err := Run(ctx, p, Options{})
			require.NoError(t, err, name)
			got := res.Output("y")
			require.Equal(t, want.Shape, got.Shape, name)
			d := CompareTensors(got, want, rtol, atol)
			require.True(t, d.OK, "%s (single device: %v): max abs err %g vs PyTorch", name, single, d.MaxAbs)
		}
	}
}
