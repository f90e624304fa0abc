package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/stretchr/testify/require"
	"golang.org/x/term"
)

// A train block that fails after ZeRO-3 chose split storage for W must not
// leave W split: the REPL shows W as declared, and the same block without
// the error then trains with W stored split.
func TestREPLFailedTrainBlockRollsBack(t *testing.T) {
	script := strings.Join([]string{
		"mesh M = [dp=2]",
		"param W : f32[4, 4] {B} = normal(0, 1)",
		"input x : f32[8, 4] {S(0)} = ones",
		"train {",
		"  loss = sum(x @ W)",
		"  optimizer = adam(lr=0.1)",
		"  zero = 3",
		"  l2 = nope(W)",
		"}",
		"",
		"W",
		":names",
		"train {",
		"  loss = sum(x @ W)",
		"  optimizer = adam(lr=0.1)",
		"  zero = 3",
		"}",
		"",
		":names",
	}, "\n")
	code, out, _ := meshrun(t, script, "repl")
	require.Equal(t, ExitOK, code)
	failed, after, ok := strings.Cut(out, `unknown function "nope"`)
	require.True(t, ok, out)
	require.Contains(t, failed, "W : f32[4, 4] {B}")
	shown, trained, ok := strings.Cut(after, "  x : f32[8, 4] {S(0)}")
	require.True(t, ok, out)
	require.Contains(t, shown, "W : f32[4, 4] {B}\n  local: [4, 4] on d0-1")
	require.Contains(t, shown, "  W : f32[4, 4] {B}\n")
	require.NotContains(t, shown, "{S(0)}", "W must not keep the ZeRO placement of the failed block")
	require.Contains(t, trained, "  W : f32[4, 4] {S(0)}\n", "the block that succeeds stores W split")
}

// A statement that fails at run time is undone: later statements, which
// re-run the whole program, do not repeat its error, and its name is not
// defined. i64 values print as integers.
func TestREPLRunTimeErrorDoesNotPoisonLaterStatements(t *testing.T) {
	dir := t.TempDir()
	idx, big := filepath.Join(dir, "idx.npy"), filepath.Join(dir, "big.npy")
	require.NoError(t, npy.WriteFile(idx, []int{4}, []int64{0, 1, 2, 9}))
	require.NoError(t, npy.WriteFile(big, []int{2}, []int64{4611686018427387904, -3}))
	script := strings.Join([]string{
		"mesh M = [dp=2]",
		"param E : f32[5, 3] {B} = normal(0, 1)",
		fmt.Sprintf("input i : i64[4] {S(0)} = load(%q)", idx),
		"y = embedding(E, i)",
		"E",
		"y",
		"input b : i64[2] {B} = load(" + strconv.Quote(big) + ")",
		":names",
	}, "\n")
	code, out, _ := meshrun(t, script, "repl")
	require.Equal(t, ExitOK, code)
	failed, after, ok := strings.Cut(out, "embedding index 9 out of range [0, 5)")
	require.True(t, ok, out)
	require.Contains(t, failed, "i : i64[4] {S(0)}\n  local: [2] on d0-1\n  value: [0 1 2 9]")
	require.Contains(t, after, "(the statement is undone")
	require.NotContains(t, after, "out of range", "a later statement repeats the error")
	require.Contains(t, after, "E : f32[5, 3] {B}\n  local: [5, 3] on d0-1\n  value: [")
	require.Contains(t, after, `unknown name "y"`)
	require.Contains(t, after, "value: [4611686018427387904 -3]")
	names := after[strings.LastIndex(after, "  E : "):]
	require.NotContains(t, names, "  y :")
}

// A run cancelled (Ctrl-C) is undone like a failed one.
func TestREPLCancelledRunIsUndone(t *testing.T) {
	var out bytes.Buffer
	s := &session{c: &common{devices: 8, timeout: time.Minute}, out: &out, runContext: backgroundRun}
	s.reset()
	var buf []string
	s.feed(&buf, "mesh M = [dp=2]")
	s.feed(&buf, "input x : f32[4] {S(0)} = ones")
	s.runContext = func() (context.Context, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // as if Ctrl-C came at once
		return ctx, func() {}
	}
	s.feed(&buf, "y = x * 2")
	s.runContext = backgroundRun
	s.feed(&buf, "z = x + 1")
	s.feed(&buf, ":names")
	cancelled, after, ok := strings.Cut(out.String(), "  run cancelled\n  (the statement is undone")
	require.True(t, ok, out.String())
	require.Contains(t, cancelled, "y : f32[4] {S(0)}")
	require.Contains(t, after, "z : f32[4] {S(0)}\n  local: [2] on d0-1\n  inserted: no collectives\n  value: [2 2 2 2]")
	require.Contains(t, after, "  x : f32[4] {S(0)}\n  z : f32[4] {S(0)}\n")
	require.NotContains(t, after, "  y :")
}

// On a terminal, Ctrl-C throws away the statement being typed (all its
// lines) and the REPL goes on; Ctrl-D on an empty line ends it.
func TestREPLCtrlCCancelsTheLineCtrlDQuits(t *testing.T) {
	keys := "mesh M = [dp=2]\r" +
		"input x : f32[4] {S(0)} =\r" + // unfinished: waits for more lines
		" ones\x03" + // Ctrl-C: the whole statement is dropped
		"x\r" + // so x was never declared
		"\x04" + // Ctrl-D quits
		"input never : f32[2] = ones\r"
	var screen bytes.Buffer
	in := &interruptReader{r: strings.NewReader(keys)}
	tm := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{in, &screen}, "meshrun> ")
	s := &session{c: &common{devices: 8, timeout: time.Minute}, out: tm, runContext: backgroundRun}
	s.reset()
	require.Equal(t, ExitOK, s.lines(tm, in))
	out := screen.String()
	require.Contains(t, out, "mesh M = [dp=2]: 2 devices")
	require.Contains(t, out, "^C")
	require.Contains(t, out, `unknown name "x"`)
	require.NotContains(t, out, "local:", "nothing was declared or run after the mesh")
	require.NotContains(t, out, "never :")
}
