package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
)

// The kernels of elementwise.cu are compiled with the C compiler, as C and
// as C++ (NVRTC compiles C++), under testdata/emu/emu.h, which runs the
// grid one thread at a time, and compared op by op with the CPU backend.
// This checks the kernels' arithmetic, their indexing and grid-stride
// loop, and NumPy broadcasting by strides (BroadcastFor); not NVRTC, the
// GPU's math library, launch limits, memory or speed.

// Tolerances against the CPU backend, whose f32 kernels are correctly
// rounded or nearly: f32 allows 4 units in the last place (the C library's
// expf/erfcf/tanhf, then one or two f32 operations); f64 2 ulp. gelu_grad
// is the sum of two terms that cancel near x = −0.75, so its error is
// bounded in absolute terms there (atol).
var tolerance = map[ir.DType]struct{ ulps, atol float64 }{
	ir.F32: {4, 1e-7},
	ir.F64: {2, 1e-15},
}

type emulator struct{ bin, dir string }

// buildEmulator compiles the kernels and the driver with the named
// compiler (cc or c++), with AddressSanitizer when it is available so an
// out-of-bounds read of an operand fails the run.
func buildEmulator(t *testing.T, compiler string) emulator {
	t.Helper()
	path, err := exec.LookPath(compiler)
	if err != nil {
		t.Skipf("no %s on this machine: the kernels' emulation test needs a C compiler", compiler)
	}
	dir := t.TempDir()
	var ops strings.Builder
	fmt.Fprintf(&ops, "#define UNARY_OPS %s\n", xlist(UnaryOps))
	fmt.Fprintf(&ops, "#define BINARY_OPS %s\n", xlist(BinaryOps))
	files := map[string]string{"elementwise.cu": ElementwiseSource, "ops.h": ops.String()}
	for _, f := range []string{"emu.h", "main.c"} {
		b, err := os.ReadFile(filepath.Join("testdata", "emu", f))
		require.NoError(t, err)
		files[f] = string(b)
	}
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	lang := []string{"-x", "c", "-std=c99"}
	if compiler == "c++" {
		lang = []string{"-x", "c++", "-std=c++17"}
	}
	bin := filepath.Join(dir, "emu")
	base := append(append([]string{}, lang...), "-O1", "-Wall", "-Werror", "-Wno-unused-function", "-o", bin, "main.c")
	san := append(append([]string{}, base...), "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-lm")
	cmd := exec.Command(path, san...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("without sanitizers (%s)", firstLine(string(out)))
		cmd = exec.Command(path, append(base, "-lm")...)
		cmd.Dir = dir
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return emulator{bin: bin, dir: dir}
}

func xlist(ops []string) string {
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "X(%s) ", op)
	}
	return b.String()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// run launches op on a grid of grid×block threads and returns the output.
func (e emulator) run(t *testing.T, op string, dt ir.DType, grid, block int, n int, bc *Broadcast, in ...[]float64) []float64 {
	t.Helper()
	args := []string{op, dt.String(), strconv.Itoa(grid), strconv.Itoa(block), strconv.Itoa(n)}
	for i, x := range in {
		p := filepath.Join(e.dir, fmt.Sprintf("in%d", i))
		require.NoError(t, os.WriteFile(p, encode(x, dt), 0o644))
		args = append(args, p)
	}
	outPath := filepath.Join(e.dir, "out")
	args = append(args, outPath)
	if bc != nil {
		args = append(args, strconv.FormatInt(bc.NDim, 10))
		for _, v := range [][MaxDims]int64{bc.Shape, bc.A, bc.B} {
			for d := 0; d < int(bc.NDim); d++ {
				args = append(args, strconv.FormatInt(v[d], 10))
			}
		}
	}
	out, err := exec.Command(e.bin, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", op, args, out)
	b, err := os.ReadFile(outPath)
	require.NoError(t, err)
	return decode(b, dt)
}

func encode(x []float64, dt ir.DType) []byte {
	var b []byte
	for _, v := range x {
		if dt == ir.F32 {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
		} else {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

func decode(b []byte, dt ir.DType) []float64 {
	var out []float64
	if dt == ir.F32 {
		for i := 0; i+4 <= len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
		return out
	}
	for i := 0; i+8 <= len(b); i += 8 {
		out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
	}
	return out
}
