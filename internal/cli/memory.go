package cli

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lower"
)

// The memory budget (--memory) is checked by lowering against the plan's
// per-device peak (lower.Options.Memory), so a program that cannot fit
// fails at compile time, at the value that does not fit, instead of after
// the work that precedes it — or by the kernel's out-of-memory killer.

// memoryFlag is --memory: bytes per device, with an optional unit.
type memoryFlag struct {
	bytes int64
	set   bool
}

func (m *memoryFlag) String() string {
	if !m.set {
		return "9/10 of the GPU's memory, or 3/4 of this machine's, shared by the devices"
	}
	return lower.HumanBytes(float64(m.bytes))
}

// Set parses a size: a number and an optional unit, B, K/KiB, M/MiB,
// G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000).
// 0 means no budget.
func (m *memoryFlag) Set(s string) error {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != 'e' && r != '+' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, ok := memoryUnits[strings.ToLower(unit)]
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("want a size such as 16GiB, 512MiB or 0 (no budget), got %q", s)
	}
	if f*mult >= math.MaxInt64 {
		return fmt.Errorf("size %q is too large", s)
	}
	m.bytes, m.set = int64(f*mult), true
	return nil
}

var memoryUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// fallbackMemory is the machine's memory assumed when /proc/meminfo
// cannot be read.
const fallbackMemory = 8 << 30

// memoryBudget is the per-device budget for a mesh of n devices: the flag;
// or, when kernels run on a GPU (--backend cuda, or auto where one can be
// opened), 9/10 of its memory (the rest is the context's, cuBLAS's
// workspace and the allocator's slack), shared by the ranks of this process
// — the local launcher runs all n on the one GPU (or blocks of them on
// each of several), MPI one per process;
// or else 3/4 of this machine's memory shared by the n devices, which the
// local launcher runs in this one process (under MPI on several machines,
// --memory says what one device has). explicitOnly drops the default
// (explain reports a plan's memory whatever it is, unless asked to judge
// it against --memory).
func (c *common) memoryBudget(n int, explicitOnly bool) int64 {
	if c.memory.set {
		return c.memory.bytes
	}
	if explicitOnly {
		return 0
	}
	if gpu, ok := c.gpuMemory(); ok {
		if mode, err := c.launchMode(); err == nil && (mode == "mpi" || mode == "rendezvous") {
			n = 1
		} else if g := localGPUs(n); g > 1 {
			n = (n + g - 1) / g // the most ranks on one GPU (localBackends)
		}
		return gpu / 10 * 9 / int64(max(n, 1))
	}
	return machineMemory() / 4 * 3 / int64(max(n, 1))
}

// hostInBudget says whether the budget also holds the host tier
// (offload): the default budget, a share of this machine's RAM, where
// the CPU backend keeps both tiers. With --memory the budget is the
// device's; with a GPU the device tier is the GPU's.
func (c *common) hostInBudget() bool {
	if c.memory.set || c.backend == "cuda" {
		return false
	}
	_, gpu := c.gpuMemory()
	return !gpu
}

// gpuMemory is the memory of the GPU the kernels will run on, when
// --backend asks for one and its driver can say: cuda.ChooseDevice's GPU,
// read without opening it (the run opens it later and reports its own
// errors). The libraries Open needs must load too, so that auto on a
// machine with the driver alone (which then runs on the CPU) keeps the
// RAM's budget. Tests replace readGPUMemory.
func (c *common) gpuMemory() (int64, bool) {
	if c.backend != "cuda" && c.backend != "auto" {
		return 0, false
	}
	n, err := readGPUMemory()
	return n, err == nil && n > 0
}

var readGPUMemory = func() (int64, error) {
	for _, l := range []cuda.Lib{cuda.Driver, cuda.NVRTC, cuda.Cublas} {
		if err := cuda.Load(l); err != nil {
			return 0, err
		}
	}
	dev, err := cuda.ChooseDevice()
	if err != nil {
		return 0, err
	}
	return cuda.TotalMemory(dev)
}

// deviceCount is how many devices a program runs on: its mesh's, with the
// pipeline axis, which the graph's mesh leaves out, included.
func deviceCount(g *ir.Graph) int {
	if g.Pipeline != nil {
		return g.Pipeline.Full.Size()
	}
	return g.Mesh.Size()
}

// referenceBudget is the budget of check's single-device reference run:
// the same memory, held by one device.
func referenceBudget(p *lower.Plan) int64 {
	b, n := p.Opts.Memory, int64(p.Exec.Mesh.Size())
	if b <= 0 || b > math.MaxInt64/n {
		return b
	}
	return b * n
}

// machineMemory reads MemTotal from /proc/meminfo.
func machineMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallbackMemory
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil && kb > 0 && kb < math.MaxInt64>>10 {
				return kb << 10
			}
		}
	}
	return fallbackMemory
}

// bucketFlag is --bucket: the bucket pass's cap of bytes per device
// (lower.Options.BucketBytes), a size as --memory takes; 0 turns the
// buckets off.
type bucketFlag struct{ memoryFlag }

func (b *bucketFlag) String() string {
	if !b.set {
		return lower.HumanBytes(lower.DefaultBucketBytes) + " (DDP's bucket_cap_mb)"
	}
	return lower.HumanBytes(float64(b.bytes))
}

func (b *bucketFlag) Set(s string) error {
	if err := b.memoryFlag.Set(s); err != nil {
		return fmt.Errorf("want a size such as 25MiB, 4MiB or 0 (no buckets), got %q", s)
	}
	return nil
}

// apply sets the lowering options the flag asks for.
func (b *bucketFlag) apply(o *lower.Options) {
	if b.set {
		o.NoBucket, o.BucketBytes = b.bytes == 0, b.bytes
	}
}
