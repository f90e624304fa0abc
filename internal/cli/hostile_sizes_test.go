package cli

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/stretchr/testify/require"
)

// Hostile inputs of sizes, expansion and files, run through the CLI: each
// must end with a usage error (exit 2) that names the problem, before any
// work — never a wrong answer, a hang or an out-of-memory death.
func TestHostileSizesAndFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.npy"), 0o644))
	short := filepath.Join(dir, "short.npy")
	require.NoError(t, npy.WriteFile(short, []int{3, 4}, make([]float32, 12)))
	b, err := os.ReadFile(short)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(short, b[:len(b)-40], 0o644))
	cases := []struct {
		name, src string
		args      []string
		want      string
	}{
		{"wrapping shape", "input x : f32[4, 1073741824, 1073741824, 1073741824] {S(0)} = ones\ny = sum(x)\noutput y\n", nil,
			"p.mesh:2:11: tensor of shape [4, 1073741824, 1073741824, 1073741824] is too large (more than 2^40 elements)"},
		{"outer product", outerSrc[len("mesh M = [dp=2]\n"):], []string{"--memory", "1GiB"},
			"p.mesh:3:26: out of memory: y brings the memory held on device 0 of 2 to 16.0 GiB"},
		{"nested loops", "input x : f32[4] = ones\ny = x\nfor i in range(10000) {\n    for j in range(10000) {\n        y = y * 1.0\n    }\n}\noutput y\n", nil,
			"p.mesh:6:15: the program is too large"},
		{"named pipe", "input x : f32[3] = load(\"fifo.npy\")\noutput x\n", nil, "is a named pipe, not a regular file"},
		{"short .npy", "input x : f32[3, 4] = load(\"short.npy\")\noutput x\n", nil,
			"p.mesh:2:28: load(\"short.npy\"): truncated .npy data: shape [3, 4] of f32 needs 48 bytes, the file holds 8"},
	}
	for _, c := range cases {
		p := writeFile(t, dir, "p.mesh", "mesh M = [dp=2]\n"+c.src)
		for _, cmd := range []string{"run", "check"} {
			code, out, errs := meshrun(t, "", append([]string{cmd, p}, c.args...)...)
			require.Equal(t, ExitUsage, code, "%s %s: %s%s", cmd, c.name, out, errs)
			require.Contains(t, errs, c.want, "%s %s", cmd, c.name)
			require.Equal(t, 1, strings.Count(errs, p+":"), "%s %s: one error, no followers:\n%s", cmd, c.name, errs)
		}
	}
	code, _, errs := meshrun(t, "", "run", "/dev/zero")
	require.Equal(t, ExitUsage, code)
	require.Equal(t, "meshrun: read /dev/zero: larger than 16777216 bytes\n", errs)
}

// A checkpoint whose tensors share bytes is refused: resuming from it
// would train from wrong values.
func TestResumeRefusesOverlappingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ex := "../../examples/train/mlp_dp.mesh"
	ck := filepath.Join(dir, "ck")
	code, _, errs := meshrun(t, "", "train", ex, "--save", ck, "--stop-at", "2")
	require.Equal(t, ExitOK, code, errs)
	path := filepath.Join(ck, "checkpoint.safetensors")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b[8:8+n], &header))
	// move the tensor stored last onto the bytes of the one stored first
	type entry struct {
		DType   string `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets [2]int `json:"data_offsets"`
	}
	var last string
	var lastE entry
	for name, raw := range header {
		var e entry
		if name == "__metadata__" || json.Unmarshal(raw, &e) != nil {
			continue
		}
		if e.Offsets[0] >= lastE.Offsets[0] {
			last, lastE = name, e
		}
	}
	size := lastE.Offsets[1] - lastE.Offsets[0]
	lastE.Offsets = [2]int{0, size}
	header[last], err = json.Marshal(lastE)
	require.NoError(t, err)
	h, err := json.Marshal(header)
	require.NoError(t, err)
	for len(h) < int(n) {
		h = append(h, ' ')
	}
	require.Len(t, h, int(n), "the edited header keeps its length")
	copy(b[8:], h)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	code, _, errs = meshrun(t, "", "train", ex, "--resume", ck)
	require.Equal(t, ExitUsage, code, errs) // flags, --resume included, are checked before any work
	require.Contains(t, errs, path+": ")
	require.Contains(t, errs, "overlaps")
}
