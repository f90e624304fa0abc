package lang

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// load() of a named pipe fails at once instead of blocking on open().
func TestLoadOfANamedPipeFails(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "x.npy"), 0o644))
	src := "mesh M = [dp=2]\ninput x : f32[3] = load(\"x.npy\")\noutput x\n"
	done := make(chan error, 1)
	go func() {
		_, err := CheckSource("m.mesh", []byte(src), CheckOptions{Dir: dir})
		done <- err
	}()
	select {
	case err := <-done:
		require.EqualError(t, err, "m.mesh:2:25: load(\"x.npy\"): "+filepath.Join(dir, "x.npy")+" is a named pipe, not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("load() of a named pipe hangs")
	}
}

// A program file is read with a limit: /dev/zero ends in an error, not in
// the process running out of memory.
func TestProgramFileSizeIsLimited(t *testing.T) {
	_, _, err := CheckFile("/dev/zero", CheckOptions{})
	require.EqualError(t, err, "read /dev/zero: larger than 16777216 bytes")
	big := filepath.Join(t.TempDir(), "big.mesh")
	require.NoError(t, os.WriteFile(big, make([]byte, MaxSourceBytes+1), 0o644))
	_, _, err = CheckFile(big, CheckOptions{})
	require.ErrorContains(t, err, "larger than 16777216 bytes")
}
