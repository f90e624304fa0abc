package rt

import (
	"context"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// shortResults is a ResultsLauncher that hands back one result fewer
// than it was asked for.
type shortResults struct{ *CPU }

func (s shortResults) LaunchResults(ctx context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block, n int) ([]Buffer, error) {
	res, err := s.CPU.LaunchResults(ctx, k, args, in, out, n)
	if err != nil {
		return nil, err
	}
	return res[:n-1], nil
}

// LaunchDonated drops a result as LaunchResults does (the CPU's, which
// the embedding would promote, writes all three).
func (s shortResults) LaunchDonated(ctx context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block, n int, donate []int) ([]Buffer, error) {
	res, err := s.CPU.LaunchDonated(ctx, k, args, in, out, n, donate)
	if err != nil {
		return nil, err
	}
	return res[:n-1], nil
}

// TestTooFewResultsIsAnError: a backend whose ResultsLauncher returns
// fewer buffers than the instruction writes slots fails the run with an
// error naming the instruction, instead of indexing past its results
// outside the kernel's recover (a panic that took the process down).
func TestTooFewResultsIsAnError(t *testing.T) {
	g, err := lang.CheckSource("adam.mesh", []byte(adamMLP("adam(lr=0.01)", "")), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	_, err = Train(context.Background(), p, Options{Backend: shortResults{&CPU{BLAS: DefaultBLAS()}}}, TrainConfig{})
	require.ErrorContains(t, err, "the backend gave 2 results, the instruction writes 3")
}
