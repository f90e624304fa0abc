package planner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func mustLinks(t *testing.T, spec string) *Links {
	t.Helper()
	l, err := ParseLinks(spec)
	require.NoError(t, err)
	return l
}

// The pruned search returns what pricing every candidate returns: the
// same strategies, in the same order, with the same costs.
func TestPrunedEqualsExhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("prices hundreds of candidates")
	}
	p, err := Load("testdata/mlp4.mesh")
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		devices int
		links   string
		memory  int64
	}{
		{"uniform", 4, "*:5:100", 0},
		{"two levels", 8, "2:1:300,*:20:10", 0},
		// under the peak of the best strategy on these links (448 KiB)
		{"memory binds", 8, "2:1:300,*:20:10", 400 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Devices: tc.devices, Links: mustLinks(t, tc.links), Memory: tc.memory, Top: 4,
				Space: Space{Schedules: []string{"1f1b", "zb1p"}, MaxMicro: 4}}
			pruned, err := Search(p, opts)
			require.NoError(t, err)
			opts.Exhaustive = true
			all, err := Search(p, opts)
			require.NoError(t, err)
			require.Equal(t, all.Candidates, all.Priced)
			require.Less(t, pruned.Priced, all.Priced, "the bounds prune nothing")
			require.NotEmpty(t, all.Ranked)
			require.Equal(t, len(all.Ranked), len(pruned.Ranked))
			for i := range all.Ranked {
				require.Equal(t, all.Ranked[i].Cost.Step, pruned.Ranked[i].Cost.Step, "rank %d: %s vs %s", i+1, all.Ranked[i].Label, pruned.Ranked[i].Label)
			}
			require.Equal(t, all.Ranked[0].Label, pruned.Ranked[0].Label)
			if tc.memory > 0 {
				require.LessOrEqual(t, pruned.Ranked[0].Cost.Peak, tc.memory)
			}
			t.Logf("%s: priced %d of %d; best %s, peak %d", tc.name, pruned.Priced, all.Candidates, pruned.Ranked[0].Label, pruned.Ranked[0].Cost.Peak)
		})
	}
}
