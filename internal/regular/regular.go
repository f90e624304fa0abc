// Package regular opens the files meshrun reads as data — .npy arrays,
// safetensors checkpoints — only when they are regular files, and reads
// program text with a size limit.
//
// Opening a named pipe for reading blocks until a writer appears, and a
// device such as /dev/zero never ends: a path a user typed must not hang or
// exhaust the process. Open therefore stats the path first (without
// opening it, so a FIFO is never opened), refuses anything but a regular
// file, and checks the opened file again in case the path changed in
// between. A data file is also read twice (the checker reads a header, the
// runtime the data), which only a regular file guarantees to give the same
// bytes.
package regular

import (
	"fmt"
	"io"
	"os"
)

// Open opens path for reading if it is a regular file, and returns its
// size.
func Open(path string) (*os.File, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, notRegular(path, fi.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err = f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func notRegular(path string, m os.FileMode) error {
	kind := "not a regular file"
	switch {
	case m.IsDir():
		kind = "a directory"
	case m&os.ModeNamedPipe != 0:
		kind = "a named pipe"
	case m&os.ModeDevice != 0:
		kind = "a device"
	case m&os.ModeSocket != 0:
		kind = "a socket"
	}
	return fmt.Errorf("%s is %s, not a regular file", path, kind)
}

// ReadLimited reads a whole file of at most limit bytes. Unlike Open it
// accepts a pipe (a program may come from one), but stops at the limit
// instead of reading an endless device until memory runs out. Its errors
// are *os.PathError, like os.ReadFile's.
func ReadLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	return b, nil
}
