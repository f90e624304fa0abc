//go:build cgo && linux

package rt

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLocalSharesBLASThreads: the local launcher gives each of its ranks
// an equal share of the process's BLAS threads (at least one), and a
// one-rank launcher all of them again. Skipped where OpenBLAS does not
// load.
func TestLocalSharesBLASThreads(t *testing.T) {
	ob, err := LoadOpenBLAS()
	if err != nil {
		t.Skip(err)
	}
	old := obThreads
	defer func() { obThreads = old; shareBLASThreads(1) }()
	obThreads = 4
	threads := func() string {
		d := DescribeBLAS(ob)
		return d[strings.LastIndex(d, ", ")+2:]
	}
	for _, c := range []struct{ mesh, want string }{{"[dp=2]", "2 thread(s)"}, {"[dp=8]", "1 thread(s)"}, {"[dp=1]", "4 thread(s)"}, {"[a=2, b=2]", "1 thread(s)"}} {
		p := compile(t, fmt.Sprintf("mesh M = %s\ninput x : f32[8] = normal(0, 1)\noutput x\n", c.mesh))
		_, err := NewLocal(context.Background(), p.Exec, Options{})
		require.NoError(t, err)
		require.Equal(t, c.want, threads(), c.mesh)
	}
}
