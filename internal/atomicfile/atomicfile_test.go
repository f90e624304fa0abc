package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Many writers of one path at once: every write succeeds, the file holds
// one writer's whole content, and no temporary file is left.
func TestConcurrentWritersOfOnePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "y.npy")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := strings.Repeat(fmt.Sprintf("%02d", i), 50000)
			errs[i] = Write(path, func(w io.Writer) error { _, err := io.WriteString(w, body); return err }, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, 100000)
	require.Equal(t, strings.Repeat(string(b[:2]), 50000), string(b), "the file mixes two writers")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(Mode), st.Mode().Perm())
	left, _ := filepath.Glob(TempPattern(path))
	require.Empty(t, left)
}

// A failed write removes its own temporary file, keeps the old file, and
// leaves another writer's temporary file alone.
func TestFailedWriteRemovesOnlyItsOwnTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.safetensors")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	other, err := os.CreateTemp(dir, ".checkpoint.safetensors.*.tmp")
	require.NoError(t, err)
	other.Close()
	boom := errors.New("disk full")
	err = Write(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom }, nil)
	require.ErrorIs(t, err, boom)
	b, _ := os.ReadFile(path)
	require.Equal(t, "old", string(b))
	left, _ := filepath.Glob(TempPattern(path))
	require.Equal(t, []string{other.Name()}, left)
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, CheckDir(filepath.Join(dir, "new", "sub")))
	require.NoDirExists(t, filepath.Join(dir, "new"), "checking must not make the directory")
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	err := CheckDir(filepath.Join(file, "sub"))
	require.ErrorContains(t, err, "not a directory")
	require.Error(t, CheckDir(file))
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	if os.Geteuid() != 0 { // root writes anywhere
		require.Error(t, CheckDir(ro))
		require.Error(t, CheckDir(filepath.Join(ro, "sub")))
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), ".meshrun-probe"), "probe file left behind")
	}
}
