package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileInputs runs bad command lines and programs through the CLI
// entry point: each must end with the given exit code and a message that
// says what is wrong, never a panic, a hang or a silent success. Usage
// errors must come before any work: nothing is printed on stdout.
func TestHostileInputs(t *testing.T) {
	dir := t.TempDir()
	blocker := writeFile(t, dir, "blocker", "a file, so no directory can be made under it")
	under := func(name string) string { return filepath.Join(blocker, name) }
	train := mustAbs(t, "../../examples/train/mlp_dp.mesh")
	fwd := mustAbs(t, "../../examples/megatron_mlp.mesh")
	pipe := mustAbs(t, "../../examples/train/pipeline_schedules.mesh")
	ck := filepath.Join(dir, "ck")
	code, _, errs := meshrun(t, "", "train", train, "--save", ck, "--stop-at", "9")
	require.Equal(t, ExitOK, code, errs)
	prog := func(name, src string) string { return writeFile(t, dir, name, src) }
	axis := prog("axis.mesh", "mesh M = [dp=2]\ninput x : f32[4, 6] {S(0)} = ones\ny = sum(x, axis=-3)\noutput y\n")
	bigInt := prog("bigint.mesh", "mesh M = [dp=2]\ninput x : f32[4, 99999999999999999999999] {S(0)} = ones\noutput x\n")

	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"train --out unwritable", []string{"train", train, "--out", under("out")}, ExitUsage, "--out " + under("out") + ": cannot write files there: mkdir " + blocker + ": not a directory"},
		{"train --plot unwritable", []string{"train", train, "--plot", under("loss.png")}, ExitUsage, "--plot " + under("loss.png") + ": cannot write the file"},
		{"train --plot a directory", []string{"train", train, "--plot", dir}, ExitUsage, "is a directory, want a file name"},
		{"train --save unwritable", []string{"train", train, "--save", under("ck")}, ExitUsage, "--save " + under("ck") + ": cannot write files there"},
		{"train --log unwritable", []string{"train", train, "--log", under("log")}, ExitUsage, "--log " + under("log") + ": cannot write the file"},
		{"run --out unwritable", []string{"run", fwd, "--out", under("out")}, ExitUsage, "--out " + under("out") + ": cannot write files there"},
		{"run --trace unwritable", []string{"run", fwd, "--trace", under("t.json")}, ExitUsage, "--trace " + under("t.json") + ": cannot write the file"},
		{"run --out empty", []string{"run", fwd, "--out", ""}, ExitUsage, "--out: the path is empty"},
		{"--save-every without --save", []string{"train", train, "--save-every", "2"}, ExitUsage, "--save-every 2: want a number of steps > 0, with --save DIR"},
		{"--save-every negative", []string{"train", train, "--save", ck, "--save-every", "-1"}, ExitUsage, "--save-every -1"},
		{"a bad flag makes no --out dir", []string{"train", train, "--out", filepath.Join(dir, "fresh", "out"), "--stop-at", "0"}, ExitUsage, "--stop-at 0"},
		{"--stop-at 0", []string{"train", train, "--stop-at", "0"}, ExitUsage, "--stop-at 0: want a step from 1 to 20"},
		{"--stop-at -1", []string{"train", train, "--stop-at", "-1"}, ExitUsage, "--stop-at -1: want a step from 1 to 20"},
		{"--stop-at past the end", []string{"train", train, "--stop-at", "21"}, ExitUsage, "--stop-at 21: want a step from 1 to 20"},
		{"--stop-at below the resumed step", []string{"train", train, "--resume", ck, "--stop-at", "5"}, ExitUsage, "--stop-at 5: the checkpoint is already at step 9"},
		{"--resume without a checkpoint", []string{"train", train, "--resume", filepath.Join(dir, "none")}, ExitUsage, "--resume " + filepath.Join(dir, "none") + ": "},
		{"train without a train block", []string{"train", fwd}, ExitUsage, "the program has no train block"},
		{"run with a train block", []string{"run", train}, ExitUsage, "the program has a train block"},
		{"--devices 0", []string{"run", fwd, "--devices", "0"}, ExitUsage, "--devices 0: want at least 1"},
		{"repl --devices 0", []string{"repl", "--devices", "0"}, ExitUsage, "--devices 0: want at least 1"},
		{"--rtol NaN", []string{"check", fwd, "--rtol", "NaN"}, ExitUsage, "--rtol NaN: want a finite number"},
		{"--rtol negative", []string{"check", fwd, "--rtol", "-5"}, ExitUsage, "--rtol -5: want a number of at least 0"},
		{"--atol Inf", []string{"check", fwd, "--atol", "Inf"}, ExitUsage, "--atol +Inf: want a finite number"},
		{"--timeout negative", []string{"run", fwd, "--timeout", "-5s"}, ExitUsage, "--timeout -5s: want a duration of at least 0"},
		{"--alpha NaN", []string{"explain", fwd, "--json", "--alpha", "NaN"}, ExitUsage, "--alpha NaN: want a finite number"},
		{"--bandwidth 0", []string{"explain", fwd, "--bandwidth", "0"}, ExitUsage, "--bandwidth 0: want a number above 0"},
		{"--link NaN", []string{"explain", fwd, "--link", "dp=NaN:10"}, ExitUsage, "want AXIS=ALPHA_US:GBPS"},
		{"--dump-after unknown", []string{"run", fwd, "--dump-after", "bogus"}, ExitUsage, `--dump-after "bogus": want one of all, check, infer, boxing`},
		{"--launcher unknown", []string{"run", fwd, "--launcher", "slurm"}, ExitUsage, `--launcher "slurm": want local, mpi, rendezvous or auto`},
		{"explain --json with --dump-after", []string{"explain", fwd, "--json", "--dump-after", "spmd"}, ExitUsage, "--dump-after with --json"},
		{"explain --launcher", []string{"explain", fwd, "--launcher", "mpi"}, ExitUsage, "--launcher mpi: explain compiles the program but does not run it"},
		{"repl --dump-after", []string{"repl", "--dump-after", "spmd"}, ExitUsage, "--dump-after: not used by the repl"},
		{"a bad flag found after compiling hides the dump", []string{"run", fwd, "--dump-after", "spmd", "--out", under("out")}, ExitUsage, "--out " + under("out")},
		{"trace --clock unknown", []string{"trace", fwd, "--clock", "sundial"}, ExitUsage, `--clock "sundial": want model, unit or wall`},
		{"trace -o unwritable", []string{"trace", fwd, "-o", under("t.json")}, ExitUsage, "-o " + under("t.json") + ": cannot write the file"},
		{"trace --svg a directory", []string{"trace", fwd, "--svg", dir}, ExitUsage, "--svg " + dir + ": is a directory"},
		{"trace --width negative", []string{"trace", fwd, "--width", "-3"}, ExitUsage, "--width -3"},
		{"trace --schedules unknown", []string{"trace", pipe, "--schedules", "gpipe,bogus"}, ExitUsage, `--schedules: schedule "bogus": unknown schedule`},
		{"trace --schedules the file's stage marks refuse", []string{"trace", "../../examples/train/mlp_offload_pipe.mesh", "--schedules", "interleaved(2)"}, ExitUsage,
			"the stage = marks give stage 2 no work: each of the 4 stages needs a unit that computes\n        pipeline = 1f1b\n        ^\nmeshrun: with pipeline = interleaved(2) from --schedules in place of the file's setting\n"},
		{"trace --schedules with --json", []string{"trace", pipe, "--schedules", "1f1b", "--json"}, ExitUsage, "--schedules prints a comparison table"},
		{"trace without FILE", []string{"trace"}, ExitUsage, "missing FILE, the program to trace"},
		{"run without FILE", []string{"run"}, ExitUsage, "missing FILE, the program to run"},
		{"run with two FILEs", []string{"run", fwd, fwd}, ExitUsage, "want one FILE, got 2"},
		{"estimate without --devices", []string{"estimate", "--params", "7.5e9"}, ExitUsage, "missing --devices D"},
		{"estimate without --params", []string{"estimate", "--devices", "8"}, ExitUsage, "missing --params N"},
		{"estimate --params NaN", []string{"estimate", "--params", "NaN", "--devices", "8"}, ExitUsage, "--params NaN: want a finite number"},
		{"estimate --params 1e300", []string{"estimate", "--params", "1e300", "--devices", "8"}, ExitUsage, "--params 1e+300: want at most 1e18"},
		{"estimate --dtype f8", []string{"estimate", "--params", "1e9", "--devices", "8", "--dtype", "f8"}, ExitUsage, `--dtype "f8": want bf16, f16 or f32`},
		{"estimate --link 0", []string{"estimate", "--params", "1e9", "--devices", "8", "--link", "0"}, ExitUsage, "--link 0: want a number above 0"},
		{"estimate --gpu-memory -1", []string{"estimate", "--params", "1e9", "--devices", "8", "--gpu-memory", "-1"}, ExitUsage, "--gpu-memory -1: want a number above 0"},
		{"estimate --k 2 in bf16", []string{"estimate", "--params", "1e9", "--devices", "8", "--k", "2"}, ExitUsage, "K counts the 4-byte f32 master weights"},
		{"grammar with an argument", []string{"grammar", "x"}, ExitUsage, "takes no arguments"},
		{"axis as written", []string{"run", axis}, ExitUsage, "sum: axis -3 out of range for rank 2"},
		{"huge integer literal", []string{"run", bigInt}, ExitUsage, "integer 99999999999999999999999 is too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := meshrun(t, "", c.args...)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", out, errs)
			require.Contains(t, errs, c.msg)
			require.NotContains(t, errs, "panic")
			require.NotContains(t, errs, "strconv")
			if c.code == ExitUsage {
				require.Empty(t, out, "a usage error must come before any work")
			}
		})
	}
	// the failed commands made nothing under dir but what the table set up
	require.NoDirExists(t, filepath.Join(dir, "fresh"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), ".meshrun-probe"), "probe file %s left behind", e.Name())
	}
}
