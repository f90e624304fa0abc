package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// --bucket sets the bucket pass's cap: 0 launches every collective on its
// own, a cap under the Megatron MLP's gradients keeps one of them out of
// the bucket; each bucket's member after the first saves 2(p−1)α = 10 µs
// of the modelled step on the default link. A bad size is a usage error
// before any work.
func TestBucketFlag(t *testing.T) {
	const ex = "../../examples/train/megatron_dp_tp.mesh"
	modelled := func(args ...string) (float64, int) {
		code, out, errs := meshrun(t, "", append([]string{"explain", "--json", ex}, args...)...)
		require.Equal(t, ExitOK, code, errs)
		var r struct {
			Totals struct {
				TimeUs float64 `json:"time_us"`
			} `json:"totals"`
			Buckets []struct {
				Values []string `json:"values"`
			} `json:"buckets"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		members := 0
		for _, b := range r.Buckets {
			members += len(b.Values)
		}
		return r.Totals.TimeUs, members
	}
	def, n := modelled()
	require.Equal(t, 3, n)
	off, n := modelled("--bucket", "0")
	require.Zero(t, n)
	require.InDelta(t, off-20, def, 1e-6)
	small, n := modelled("--bucket", "2KiB") // W1's 2 KiB gradient no longer fits beside the others
	require.Equal(t, 2, n)
	require.InDelta(t, off-10, small, 1e-6)
	for _, bad := range []string{"lots", "-1"} {
		code, _, errs := meshrun(t, "", "run", ex, "--bucket", bad)
		require.Equal(t, ExitUsage, code)
		require.Contains(t, errs, `invalid value "`+bad+`" for flag -bucket`)
	}
}
