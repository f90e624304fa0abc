package cli

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A pipelined run saved part-way and resumed gives the uninterrupted
// run's parameters bit for bit: each stage's parameters and Adam states
// are gathered from the rank that holds them and put back there.
func TestPipelineResumeIsBitForBit(t *testing.T) {
	dir := t.TempDir()
	ex := "../../examples/train/gpt/gpt_3d.mesh"
	ck := filepath.Join(dir, "ck")
	code, out, errs := meshrun(t, "", "train", ex, "--save", ck, "--stop-at", "4")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "stopped after step 4 of 10")
	code, _, errs = meshrun(t, "", "train", ex, "--resume", ck, "--out", filepath.Join(dir, "resumed"))
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", ex, "--out", filepath.Join(dir, "straight"))
	require.Equal(t, ExitOK, code, errs)
	for _, p := range []string{"wte.npy", "Wq0.npy", "W21.npy", "Wout.npy"} {
		a, err := os.ReadFile(filepath.Join(dir, "straight", p))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, "resumed", p))
		require.NoError(t, err)
		require.Equal(t, a, b, "%s differs between a resumed and an uninterrupted run", p)
	}
}

func TestTraceDrawsTheSchedule(t *testing.T) {
	dir := t.TempDir()
	ex := "../../examples/train/pipeline_schedules.mesh"
	chrome, svg := filepath.Join(dir, "t.json"), filepath.Join(dir, "t.svg")
	code, out, errs := meshrun(t, "", "trace", ex, "-o", chrome, "--svg", svg)
	require.Equal(t, ExitOK, code, errs)
	for r := range 4 {
		require.Contains(t, out, "rank "+string(rune('0'+r))+" |")
	}
	require.Contains(t, out, "bubble 27.3%")
	require.Contains(t, out, "(K−1)/(M+K−1) = 27.3%")
	require.Contains(t, out, "stage 0: at most 4 micro-batch(es)")
	require.Contains(t, out, "stage 3: at most 1 micro-batch(es)")

	var doc struct {
		TraceEvents []struct {
			Name, Cat string
			Tid       int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(readFile(t, chrome)), &doc))
	actions, tracks := 0, map[int]bool{}
	for _, e := range doc.TraceEvents {
		tracks[e.Tid] = true
		if e.Cat == "pipeline" {
			actions++
		}
	}
	require.Equal(t, 4*8*2, actions, "4 ranks × 8 micro-batches × (F, B)")
	require.Len(t, tracks, 4)
	require.NoError(t, xml.Unmarshal([]byte(readFile(t, svg)), new(struct{})))

	code, out, errs = meshrun(t, "", "trace", ex, "--json")
	require.Equal(t, ExitOK, code, errs)
	var events []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &events))
	require.Len(t, events, 4*8*2)
	for _, k := range []string{"rank", "stage", "micro", "kind", "start", "end"} {
		require.Contains(t, events[0], k)
	}
}

func TestTraceComparesSchedules(t *testing.T) {
	code, out, errs := meshrun(t, "", "trace", "../../examples/train/pipeline_schedules.mesh", "--schedules", "naive,gpipe,1f1b,zb1p")
	require.Equal(t, ExitOK, code, errs)
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 8)
	// naive: the whole batch through 4 stages one after another, 3 units each
	require.Regexp(t, `^naive +4 +75\.0% +\(K−1\)/K = 75\.0% +12 units +1 1 1 1 `, lines[3])
	lines = lines[1:]
	require.Regexp(t, `^gpipe +4 +27\.3% +\(K−1\)/\(M\+K−1\) = 27\.3% +4\.125 units +8 8 8 8 `, lines[3])
	require.Regexp(t, `^1f1b +4 +27\.3% .* +4 3 2 1 `, lines[4])
	require.Regexp(t, `^zb1p +4 +11\.1% +\(K−1\)/\(3M\+K−1\) = 11\.1% `, lines[5])
}

// Flags and output paths are checked before the run.
func TestTraceChecksItsFlagsFirst(t *testing.T) {
	ex := "../../examples/train/pipeline_schedules.mesh"
	code, _, errs := meshrun(t, "", "trace", ex, "-o", "/nonexistent-dir/t.json")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "-o /nonexistent-dir/t.json: cannot write the file")
	code, _, errs = meshrun(t, "", "trace", ex, "--clock", "sundial")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, `--clock "sundial": want model, unit or wall`)
	code, _, errs = meshrun(t, "", "trace", ex, "--schedules", "gpipe,interleaved(")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "missing ')'")
}
