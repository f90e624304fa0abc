package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeGPUs is a gpuSource with a machine written by hand.
type fakeGPUs struct {
	openErr error
	driver  string
	devs    []gpuDevice
	pairs   map[[2]int]gpuPair
	closed  bool
}

func (f *fakeGPUs) Open() error         { return f.openErr }
func (f *fakeGPUs) Close()              { f.closed = true }
func (f *fakeGPUs) Driver() string      { return f.driver }
func (f *fakeGPUs) Count() (int, error) { return len(f.devs), nil }
func (f *fakeGPUs) Device(i int) (gpuDevice, error) {
	return f.devs[i], nil
}
func (f *fakeGPUs) Pair(i, j int) (gpuPair, error) {
	p, ok := f.pairs[[2]int{i, j}]
	if !ok {
		return gpuPair{}, errors.New("no such pair")
	}
	return p, nil
}

func TestDevicesListingAndTopology(t *testing.T) {
	// GPU 0 and 1: 4 NVLinks between them (NVML writes the far end's bus id
	// with a short domain and upper case); GPU 2 only on PCIe, across sockets.
	f := &fakeGPUs{
		driver: "580.65.06",
		devs: []gpuDevice{
			{Name: "NVIDIA H200", MemoryBytes: 150 << 30, Major: 9, Minor: 0, BusID: "00000000:19:00.0",
				NVLinkActive: 4, NVLinkPeers: []string{"0000:3B:00.0", "0000:3B:00.0", "0000:3B:00.0", "0000:3B:00.0"}},
			{Name: "NVIDIA H200", MemoryBytes: 150 << 30, Major: 9, Minor: 0, BusID: "00000000:3b:00.0",
				NVLinkActive: 4, NVLinkPeers: []string{"0000:19:00.0", "0000:19:00.0", "0000:19:00.0", "0000:19:00.0"}},
			{Name: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, Major: 8, Minor: 0, BusID: "00000000:86:00.0"},
		},
		pairs: map[[2]int]gpuPair{
			{0, 1}: {Level: "NODE", P2P: true}, {1, 0}: {Level: "NODE", P2P: true},
			{0, 2}: {Level: "SYS"}, {2, 0}: {Level: "SYS"},
			{1, 2}: {Level: "SYS", P2P: true}, {2, 1}: {Level: "SYS", P2P: true},
		},
	}
	var out bytes.Buffer
	require.NoError(t, listDevices(&out, f))
	require.True(t, f.closed, "NVML shut down after listing")
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	want := []string{
		"NVIDIA driver 580.65.06: 3 GPUs",
		"",
		"GPU  name                   memory     compute  PCI bus id        NVLinks",
		"0    NVIDIA H200            150.0 GiB  sm_90    00000000:19:00.0  4",
		"1    NVIDIA H200            150.0 GiB  sm_90    00000000:3b:00.0  4",
		"2    NVIDIA A100-SXM4-40GB  40.0 GiB   sm_80    00000000:86:00.0  0",
		"",
	}
	require.Equal(t, want, lines[:len(want)])
	require.True(t, strings.HasPrefix(lines[len(want)], "topology (NV<k>"), lines[len(want)])
	require.Equal(t, []string{
		"      GPU0     GPU1     GPU2",
		"GPU0  X        NV4+p2p  SYS",
		"GPU1  NV4+p2p  X        SYS+p2p",
		"GPU2  SYS      SYS+p2p  X",
	}, lines[len(want)+1:])
}

func TestDevicesOneGPUHasNoMatrix(t *testing.T) {
	f := &fakeGPUs{devs: []gpuDevice{{Name: "NVIDIA L4", MemoryBytes: 23 << 30, Major: 8, Minor: 9, BusID: "00000000:01:00.0"}}}
	var out bytes.Buffer
	require.NoError(t, listDevices(&out, f))
	require.Equal(t, "1 GPU\n\nGPU  name       memory    compute  PCI bus id        NVLinks\n"+
		"0    NVIDIA L4  23.0 GiB  sm_89    00000000:01:00.0  0\n", out.String())
}

func TestDevicesNoGPUAndNoDriver(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, listDevices(&out, &fakeGPUs{driver: "580.65.06"}))
	require.Equal(t, "NVIDIA driver 580.65.06: no GPU\n", out.String())

	out.Reset()
	require.NoError(t, listDevices(&out, &fakeGPUs{openErr: errNoDriver}))
	require.Contains(t, out.String(), "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)\n")

	out.Reset()
	require.NoError(t, listDevices(&out, &fakeGPUs{openErr: errDriverNotRunning}))
	require.Contains(t, out.String(), "no NVIDIA driver running (libnvidia-ml.so.1 loads, but the kernel driver is not loaded)\n")

	// Any other NVML failure is an error, not a listing.
	out.Reset()
	require.Error(t, listDevices(&out, &fakeGPUs{openErr: errors.New("NVML init: Insufficient Permissions")}))
}

func TestSameBusID(t *testing.T) {
	require.True(t, sameBusID("00000000:3b:00.0", "0000:3B:00.0"))
	require.False(t, sameBusID("00000000:3b:00.0", "00000000:3c:00.0"))
	require.Equal(t, "PHB", topologyLevel(30))
	require.Equal(t, "level7", topologyLevel(7))
}

// TestDevicesCommandWithoutDriver runs the real NVML path. On a machine
// with no libnvidia-ml.so.1 in the loader's usual places it must say so and
// exit 0; where the library exists it must list (or say "no GPU") and exit 0.
func TestDevicesCommandWithoutDriver(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"devices"}, nil, &out, &errb)
	require.Equal(t, ExitOK, code, errb.String())
	if nvmlInstalled() {
		require.NotContains(t, out.String(), "no NVIDIA driver found")
		return
	}
	require.Contains(t, out.String(), "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)")
	require.Equal(t, ExitUsage, Main([]string{"devices", "extra"}, nil, &out, &errb))
}

// nvmlInstalled looks for the library where the dynamic loader would: the
// directories of LD_LIBRARY_PATH and the system's library directories.
func nvmlInstalled() bool {
	dirs := filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))
	dirs = append(dirs, "/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "libnvidia-ml.so.1")); err == nil {
			return true
		}
	}
	return false
}
