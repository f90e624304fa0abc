package specgen

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated sections of spec.md")

// TestSpecIsCurrent fails when spec.md's generated sections differ from
// the code. Refresh with: go test ./internal/specgen -update
func TestSpecIsCurrent(t *testing.T) {
	doc, err := os.ReadFile("../../spec.md")
	require.NoError(t, err)
	want, err := Apply(string(doc))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile("../../spec.md", []byte(want), 0o644))
		return
	}
	require.Equal(t, want, string(doc), "spec.md is stale: run go test ./internal/specgen -update")
}
