package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// explain --blocks prints the blocks view (the labels are lower's tests');
// with --json the same data as one document; a program without local
// functions says so.
func TestExplainBlocks(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "s.mesh", "mesh M = [r=2, c=2]\nuse par\ninput X : f32[4, 4] = normal(0, 1)\ninput W : f32[4, 4] = normal(0, 1)\nY = par.summa(X, W)\noutput Y\n")
	code, out, errs := meshrun(t, "", "explain", "--blocks", f)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "call 1: summa at s.mesh:5:5: Y = par.summa(X, W)")
	require.Contains(t, out, "r=1   Y[1,0] = X[1,0]·W[0,0] + X[1,1]·W[1,0]")

	code, out, errs = meshrun(t, "", "explain", "--blocks", "--json", f)
	require.Equal(t, ExitOK, code, errs)
	var r struct {
		Axes  []string `json:"axes"`
		Calls []struct {
			Function string `json:"function"`
			Steps    []struct {
				Moves []struct {
					Op      string `json:"op"`
					Devices []struct {
						After string `json:"after"`
						Bytes int64  `json:"bytes_sent"`
					} `json:"devices"`
				} `json:"moves"`
			} `json:"steps"`
			Results []struct {
				Blocks  []string `json:"blocks"`
				Devices []string `json:"devices"`
			} `json:"results"`
		} `json:"calls"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, []string{"r", "c"}, r.Axes)
	require.Len(t, r.Calls, 1)
	require.Equal(t, "summa", r.Calls[0].Function)
	require.Len(t, r.Calls[0].Steps, 2)
	mv := r.Calls[0].Steps[0].Moves[0]
	require.Equal(t, "broadcast", mv.Op)
	require.Equal(t, "X[0,0]", mv.Devices[1].After)
	require.Equal(t, int64(16), mv.Devices[0].Bytes)
	require.Equal(t, "Y[1,1]", r.Calls[0].Results[0].Blocks[3])

	code, out, errs = meshrun(t, "", "explain", "--blocks", "../../examples/dp_mlp.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "no local function is called")
}
