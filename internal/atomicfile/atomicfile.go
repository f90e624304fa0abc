// Package atomicfile writes a file so that readers see either the old file
// or the whole new one, and so that several processes writing into one
// directory at once never touch each other's work: each write goes to a
// temporary file of its own (os.CreateTemp in the target directory, so the
// rename stays on one file system), which only that write removes.
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Mode is the permission of every file written here, whatever the
// temporary file was created with (os.CreateTemp uses 0600).
const Mode = 0o644

// Write creates path with the bytes write produces. The data is synced
// before the rename, so a crash leaves the old file or the new one, never
// a torn one. beforeRename, when set, runs between the write and the
// rename (tests use it to stall a save). On failure nothing but this
// call's own temporary file is removed.
func Write(path string, write func(io.Writer) error, beforeRename func()) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close() // may already be closed; the write's error is the one to report
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(Mode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if beforeRename != nil {
		beforeRename()
	}
	return os.Rename(tmp, path)
}

// TempPattern is the glob that matches the temporary files Write makes for
// path (tests look for them).
func TempPattern(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".*.tmp")
}

// CheckDir reports whether files can be created in dir, by creating and
// removing a temporary file there. A missing dir is fine if the writers
// can make it (with os.MkdirAll): then its nearest existing ancestor must
// be a writable directory. Nothing is left behind, and no directory is
// made: commands call it before any work, so that a bad output path fails
// in a second rather than after a long run, and a run that stops before
// its work (a wrong process count) leaves no trace.
func CheckDir(dir string) error {
	probe := filepath.Clean(dir)
	for {
		st, err := os.Stat(probe)
		if err == nil {
			if !st.IsDir() {
				return &os.PathError{Op: "mkdir", Path: probe, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) { // ENOTDIR: a file on the way up, found next
			return err
		}
		up := filepath.Dir(probe)
		if up == probe {
			return err
		}
		probe = up
	}
	f, err := os.CreateTemp(probe, ".meshrun-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
