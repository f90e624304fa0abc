package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rowOf finds the table line of an algorithm (its forward line).
func rowOf(t *testing.T, out, algorithm string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), algorithm+" ") {
			return l
		}
	}
	t.Fatalf("no row for %s in\n%s", algorithm, out)
	return ""
}

func TestGemmTableOnEightDevices(t *testing.T) {
	code, out, errs := meshrun(t, "", "gemm", "--m", "1024", "--k", "1024", "--n", "1024", "--devices", "8")
	require.Equal(t, ExitOK, code, errs)
	// every layout of 8 devices, in order: no 2D (8 is not a square)
	var names []string
	for _, a := range []string{"1D column p=8", "1D row p=8", "2.5D Tesseract 1×1×8 (DP)", "2.5D Tesseract 2×2×2", "3D 2×2×2", "2D SUMMA"} {
		if strings.Contains(out, "\n  "+a) {
			names = append(names, a)
		}
	}
	require.Equal(t, []string{"1D column p=8", "1D row p=8", "2.5D Tesseract 1×1×8 (DP)", "2.5D Tesseract 2×2×2", "3D 2×2×2"}, names)
	// figures worked by hand, f32, m = k = n = 2^10:
	// 3D holds 3·2^20/8 elements = 1.5 MiB and sends (1/2)·3·2^20/4 elements = 1.5 MiB each way
	row := rowOf(t, out, "3D 2×2×2")
	require.Regexp(t, `\[x=2, y=2, z=2\] +1\.5 MiB +\(mk\+kn\+mn\)/q³ +fwd +1\.5 MiB +\(q−1\)/q·\(mk\+kn\+mn\)/q² +3 +3\(q−1\)`, row)
	// 1D column: X whole (4 MiB) plus an eighth of W and Y; backward all-reduce 2·7/8·4 MiB = 7 MiB in 14 messages
	require.Regexp(t, `\[tp=8\] +5\.0 MiB +mk \+ \(kn\+mn\)/p +fwd +0 B`, rowOf(t, out, "1D column p=8"))
	require.Regexp(t, `(?m)^ +bwd +7\.0 MiB +2\(p−1\)/p·mk +14 +2\(p−1\) `, out)
	// 2.5D 2×2×2: X and Y blocks of 2^20/8 elements, W 2^20/4: 2.0 MiB
	require.Regexp(t, `\[depth=2, row=2, col=2\] +2\.0 MiB`, rowOf(t, out, "2.5D Tesseract 2×2×2"))
	require.Contains(t, out, "3D 2×2×2 is fastest on these links")
	require.NotContains(t, out, "sizes do not divide")
}

// A slow x axis puts 3D's X traffic on it, a slow depth axis 2.5D's
// weight-gradient all-reduce; 1D, which has neither, then wins.
func TestGemmWinnerFollowsTheLinks(t *testing.T) {
	code, out, errs := meshrun(t, "", "gemm", "--m", "1024", "--k", "1024", "--n", "1024", "--devices", "8", "--link", "x=50:1,depth=50:1")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "x: alpha 50 us, 1 GB/s")
	require.Contains(t, out, "\n1D column p=8 is fastest on these links")
	require.Contains(t, out, "bandwidth-bound")
}

func TestGemmUnevenSizesAreMarked(t *testing.T) {
	code, out, errs := meshrun(t, "", "gemm", "--m", "9", "--k", "7", "--n", "5", "--devices", "27", "--dtype", "f64")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "3D 3×3×3 *")
	require.Contains(t, out, "* the sizes do not divide evenly")
	require.Contains(t, out, "(e = 8 bytes)")
}

// --padded: every block that moves is the largest of its split, as
// par.summa runs it (rt's TestLocalBytesSUMMA measures the same 96 bytes):
// 7×5×8 on 3×3 moves X blocks of ⌈7/3⌉·⌈5/3⌉ = 6 and W blocks of
// ⌈5/3⌉·⌈8/3⌉ = 6 elements, (q−1)·12 = 24 elements = 96 B each way on
// every device. Balanced, the busiest sends 96 B forward (device 0: 3×2
// and 2×3 blocks) but 72 B backward.
func TestGemmPadded(t *testing.T) {
	sent := func(args ...string) [2]int64 {
		code, out, errs := meshrun(t, "", append([]string{"gemm", "--m", "7", "--k", "5", "--n", "8", "--devices", "9", "--json"}, args...)...)
		require.Equal(t, ExitOK, code, errs)
		var doc struct {
			Layouts []struct {
				Algorithm string   `json:"algorithm"`
				Sent      [2]int64 `json:"sent_bytes"`
			} `json:"layouts"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		for _, l := range doc.Layouts {
			if l.Algorithm == "2D SUMMA 3×3" {
				return l.Sent
			}
		}
		t.Fatalf("no 2D row in %s", out)
		return [2]int64{}
	}
	require.Equal(t, [2]int64{96, 96}, sent("--padded"))
	require.Equal(t, [2]int64{96, 72}, sent())
	code, out, errs := meshrun(t, "", "gemm", "--m", "7", "--k", "5", "--n", "8", "--devices", "9", "--padded")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "--padded: every block that moves is the largest of its split")
}

func TestGemmJSON(t *testing.T) {
	code, out, errs := meshrun(t, "", "gemm", "--m", "64", "--k", "32", "--n", "16", "--devices", "4", "--json")
	require.Equal(t, ExitOK, code, errs)
	var doc struct {
		M       int `json:"m"`
		Devices int `json:"devices"`
		Layouts []struct {
			Algorithm string   `json:"algorithm"`
			Memory    int64    `json:"memory_bytes"`
			Sent      [2]int64 `json:"sent_bytes"`
			Comms     []struct {
				Kind  string `json:"kind"`
				Bytes int64  `json:"bytes"`
			} `json:"comms"`
		} `json:"layouts"`
		Fastest string `json:"fastest"`
		Why     string `json:"why"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Equal(t, 4, doc.Devices)
	require.Equal(t, 64, doc.M)
	require.Len(t, doc.Layouts, 4)
	l := doc.Layouts[2]
	require.Equal(t, "2D SUMMA 2×2", l.Algorithm)
	// (64·32 + 32·16 + 64·16)/4 elements of 4 bytes; forward (q−1)(mk+kn)/q² = 640 elements
	require.Equal(t, int64(3584/4*4), l.Memory)
	require.Equal(t, int64(640*4), l.Sent[0])
	var sum int64
	for _, c := range l.Comms {
		sum += c.Bytes
	}
	require.Equal(t, l.Sent[0]+l.Sent[1], sum)
	require.NotEmpty(t, doc.Fastest)
	require.Contains(t, doc.Why, doc.Fastest)
}

func TestGemmWritesPictures(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pics")
	code, out, errs := meshrun(t, "", "gemm", "--m", "8", "--k", "8", "--n", "8", "--devices", "4", "--svg", dir)
	require.Equal(t, ExitOK, code, errs)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"1d-column-4.svg", "1d-row-4.svg", "2d-2x2-step0.svg", "2d-2x2-step1.svg", "2d-2x2.svg", "2p5d-1x1x4.svg"}
	slices.Sort(names)
	require.Equal(t, want, names)
	require.Contains(t, out, "wrote 6 pictures into "+dir)
	b, err := os.ReadFile(filepath.Join(dir, "2d-2x2-step1.svg"))
	require.NoError(t, err)
	require.Contains(t, string(b), "2D SUMMA 2×2, step 1 of 2")
}

func TestGemmFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--m", "8", "--devices", "0", "--dtype", "f8", "extra"}, []string{
			"meshrun gemm: takes no FILE, got extra", "missing --k", "missing --n", "--devices 0: want 1 to 65536", `--dtype "f8": want f32, f64, bf16 or f16`}},
		{[]string{"--m", "0", "--k", "-1", "--n", "4", "--devices", "4"}, []string{"--m 0: want at least 1", "--k -1: want at least 1"}},
		{[]string{"--m", "8", "--k", "8", "--n", "8", "--devices", "4", "--link", "x=1:1,row=2,bogus=1:1"}, []string{
			`--link "x=1:1": no layout of 4 devices has an axis x`, `--link "row=2": want AXIS=ALPHA_US:GBPS`, `unknown axis "bogus"`}},
		{[]string{"--m", "8", "--k", "8", "--n", "8", "--devices", "4", "--bandwidth", "0", "--alpha", "NaN"}, []string{"--bandwidth 0: want a number above 0", "--alpha NaN: want a finite number"}},
		{[]string{"--m", "8", "--k", "8", "--n", "8", "--devices", "4", "--svg", ""}, []string{"--svg: the path is empty"}},
		{[]string{"--m", "8", "--k", "8", "--n", "8", "--devices", "4", "--svg", filepath.Join(file, "pics")}, []string{"--svg " + filepath.Join(file, "pics") + ": cannot write files there"}},
		{[]string{"--m", "8", "--k", "8", "--n", "8", "--devices", "512", "--svg", t.TempDir()}, []string{"pictures are drawn for at most 256 devices"}},
		{[]string{"--m", "2000000", "--k", "2000000", "--n", "1", "--devices", "2"}, []string{"m×k = 2000000×2000000: more than 2^40 elements"}},
	} {
		code, out, errs := meshrun(t, "", append([]string{"gemm"}, c.args...)...)
		require.Equal(t, ExitUsage, code, "%v", c.args)
		require.Empty(t, out, "%v", c.args)
		for _, w := range c.want {
			require.Contains(t, errs, w, "%v", c.args)
		}
		require.Contains(t, errs, "(meshrun gemm --help lists the flags)")
	}
	code, _, errs := meshrun(t, "", "gemm", "--help")
	require.Equal(t, ExitOK, code)
	require.Regexp(t, regexp.MustCompile(`usage: meshrun gemm --m M --k K --n N --devices P`), errs)
}

// docs/layouts holds what these commands write (docs/README.md lists them).
func TestDocsLayoutsAreUpToDate(t *testing.T) {
	dir := t.TempDir()
	for _, c := range [][2]string{{"8", "4"}, {"8", "8"}, {"9", "27"}} {
		code, _, errs := meshrun(t, "", "gemm", "--m", c[0], "--k", c[0], "--n", c[0], "--devices", c[1], "--svg", dir)
		require.Equal(t, ExitOK, code, errs)
	}
	want, err := os.ReadDir(dir)
	require.NoError(t, err)
	got, err := os.ReadDir("../../docs/layouts")
	require.NoError(t, err)
	require.Equal(t, len(want), len(got), "docs/layouts has other files than the commands write")
	for _, e := range want {
		a, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join("../../docs/layouts", e.Name()))
		require.NoError(t, err, "regenerate with the commands in docs/README.md")
		require.Equal(t, string(a), string(b), "%s is stale: regenerate with the commands in docs/README.md", e.Name())
	}
}
