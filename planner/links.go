package planner

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/mesh"
)

// Links is a hierarchical link model: devices are numbered row-major over
// the mesh, and consecutive aligned blocks of Levels[i].Size devices are
// joined by Levels[i].Link (a node of 8 GPUs on NVLink, then the network).
// An axis gets the link of the smallest level whose blocks contain each of
// its groups whole: its stride times its size divides the level's size.
// A ring over an axis that spans two blocks runs at the slower level's
// speed, since its slowest hop sets the pace.
type Links struct {
	Levels []Level // increasing sizes; the last one (Size 0) holds every device
}

// Level is one tier of the hierarchy.
type Level struct {
	Size int // devices per block; 0 for the outermost tier (all devices)
	Link mesh.Link
}

// HostLink prices ZeRO-Offload's copies between a device and its host:
// PCIe 4.0 x16, about 25 GB/s each way and 10 µs per transfer.
var HostLink = mesh.Link{Alpha: 10e-6, Beta: 1 / 25e9}

// Uniform is one link for every axis (no hierarchy).
func Uniform(l mesh.Link) *Links { return &Links{Levels: []Level{{Link: l}}} }

// ParseLinks reads a spec such as "8:1:300,*:10:25": blocks of 8 devices
// with 1 µs latency and 300 GB/s, everything beyond at 10 µs and 25 GB/s.
// Each entry is SIZE:ALPHA_US:GBPS, sizes increasing (each dividing the
// next), the last SIZE "*".
func ParseLinks(spec string) (*Links, error) {
	parts := strings.Split(spec, ",")
	l := &Links{}
	for i, part := range parts {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("--links %q: entry %q: want SIZE:ALPHA_US:GBPS (the last SIZE *)", spec, part)
		}
		size := 0
		last := i == len(parts)-1
		switch {
		case last && f[0] != "*":
			return nil, fmt.Errorf("--links %q: the last SIZE must be * (the level that joins every device), got %q", spec, f[0])
		case !last:
			n, err := strconv.Atoi(f[0])
			if err != nil || n < 2 {
				return nil, fmt.Errorf("--links %q: entry %q: the size must be a whole number of at least 2 (only the last entry's is *)", spec, part)
			}
			if k := len(l.Levels); k > 0 && n%l.Levels[k-1].Size != 0 {
				return nil, fmt.Errorf("--links %q: block size %d is not a multiple of the previous level's %d", spec, n, l.Levels[k-1].Size)
			}
			size = n
		}
		alpha, err1 := strconv.ParseFloat(f[1], 64)
		bw, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || !(alpha >= 0) || !(bw > 0) || math.IsInf(alpha+bw, 0) {
			return nil, fmt.Errorf("--links %q: entry %q: want a latency ≥ 0 µs and a bandwidth > 0 GB/s", spec, part)
		}
		l.Levels = append(l.Levels, Level{Size: size, Link: mesh.Link{Alpha: alpha * 1e-6, Beta: 1 / (bw * 1e9), Gamma: mesh.DefaultLink.Gamma}})
	}
	return l, nil
}

// Axis returns the link of axis a of a mesh with the given sizes, and the
// level it falls in (0 the innermost).
func (l *Links) Axis(sizes []int, a int) (mesh.Link, int) {
	span := sizes[a]
	for _, s := range sizes[a+1:] {
		span *= s
	}
	for i, lv := range l.Levels {
		if lv.Size == 0 || lv.Size%span == 0 {
			return lv.Link, i
		}
	}
	last := len(l.Levels) - 1
	return l.Levels[last].Link, last
}

// String writes the model back in ParseLinks's form.
func (l *Links) String() string {
	var parts []string
	for _, lv := range l.Levels {
		size := "*"
		if lv.Size > 0 {
			size = strconv.Itoa(lv.Size)
		}
		parts = append(parts, fmt.Sprintf("%s:%g:%g", size, lv.Link.Alpha*1e6, 1/lv.Link.Beta/1e9))
	}
	return strings.Join(parts, ",")
}
