package regular

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadLimitedStopsAtTheLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadLimited(p, 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadLimited(p, 4); err == nil || err.Error() != "read "+p+": larger than 4 bytes" {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := ReadLimited("/dev/zero", 1<<10); err == nil {
		t.Fatal("an endless device was read")
	}
}

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, n, err := Open(p)
	if err != nil || n != 3 {
		t.Fatalf("regular file: %d, %v", n, err)
	}
	f.Close()
	for path, want := range map[string]string{
		dir:         dir + " is a directory, not a regular file",
		"/dev/null": "/dev/null is a device, not a regular file",
	} {
		if _, _, err := Open(path); err == nil || err.Error() != want {
			t.Errorf("Open(%s) = %v, want %q", path, err, want)
		}
	}
}
