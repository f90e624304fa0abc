package lang

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMicroCopyMoreSettings: the copied micro-batches are the checked
// graph under settings TestMicroCopyIsTheCheckedGraph does not add:
// offload (optimizer, optimizer+params), ZeRO-3 on pipelines, and every
// pipeline schedule with ZeRO and mixed precision.
func TestMicroCopyMoreSettings(t *testing.T) {
	sets := [][]string{
		{"accumulate = 2", "zero = 1", "offload = optimizer"},
		{"accumulate = 4", "zero = 2", "offload = optimizer+params"},
		{"accumulate = 2", "zero = 3", "offload = optimizer", "precision = f16"},
		{"microbatches = 4", "zero = 3"},
		{"microbatches = 2", "zero = 3", "precision = bf16"},
		{"microbatches = 4", "zero = 1", "offload = optimizer", "clip = 0.5"},
	}
	copied := 0
	for _, p := range microPrograms(t) {
		s := string(p.src)
		if !strings.Contains(s, "train {\n") || strings.Contains(p.name, ", ") || strings.Contains(p.name, " pipeline ") {
			continue // the originals only
		}
		for _, set := range sets {
			for _, sched := range []string{"", "1f1b", "zbv"} {
				if sched != "" && !strings.Contains(s, "pipeline ") {
					continue
				}
				opts := p.opts
				opts.Pipeline = sched
				q := microProgram{p.name + " " + strings.Join(set, ", ") + " " + sched,
					[]byte(strings.Replace(s, "train {\n", "train {\n    "+strings.Join(set, "\n    ")+"\n", 1)), opts}
				ref := opts
				ref.noMicroCopy = true
				gotG, gotErr, n := checkCounting(q, opts)
				wantG, wantErr, _ := checkCounting(q, ref)
				require.Equal(t, errText(wantErr), errText(gotErr), q.name)
				if wantG == nil {
					continue
				}
				require.Equal(t, graphText(wantG), graphText(gotG), q.name)
				copied += n
			}
		}
	}
	t.Logf("%d micro-batches copied", copied)
	require.Greater(t, copied, 40)
}
