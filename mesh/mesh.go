// Package mesh describes a logical device mesh: an n-dimensional grid of
// devices with named axes, such as [dp=2, tp=4].
//
// Devices are numbered in row-major order of their mesh coordinates, so on
// [dp=2, tp=4] device 5 sits at (dp=1, tp=1). A collective "over axis a" runs
// inside a group: the devices that share every coordinate except the one on
// axis a. Groups over one axis partition the mesh; Group returns the members
// of a device's group in axis order, which is also the ring order used by the
// ring collectives.
//
// Split tensors are laid out hierarchically: when several mesh axes split the
// same tensor dim, the lower-numbered axis splits first and each later axis
// splits the block it is given. Shards are balanced (numpy.array_split): the
// first n mod p shards hold one element more than the rest.
package mesh

import (
	"fmt"
	"strings"
)

// Axis is one named dimension of a mesh.
type Axis struct {
	Name string
	Size int
}

// Mesh is a named grid of devices.
type Mesh struct {
	Name string
	Axes []Axis
}

// New builds a mesh from axis names and sizes.
func New(name string, axes ...Axis) *Mesh {
	return &Mesh{Name: name, Axes: append([]Axis(nil), axes...)}
}

// Single is the one-device mesh with the same axis names as m (every axis of
// size 1). Running a program on it gives the single-device reference.
func (m *Mesh) Single() *Mesh {
	s := &Mesh{Name: m.Name}
	for _, a := range m.Axes {
		s.Axes = append(s.Axes, Axis{a.Name, 1})
	}
	return s
}

// Size is the number of devices.
func (m *Mesh) Size() int {
	n := 1
	for _, a := range m.Axes {
		n *= a.Size
	}
	return n
}

// NumAxes is the mesh rank.
func (m *Mesh) NumAxes() int { return len(m.Axes) }

// AxisIndex returns the index of the named axis, or -1.
func (m *Mesh) AxisIndex(name string) int {
	for i, a := range m.Axes {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// Coord returns the mesh coordinate of a device.
func (m *Mesh) Coord(dev int) []int {
	c := make([]int, len(m.Axes))
	for i := len(m.Axes) - 1; i >= 0; i-- {
		c[i] = dev % m.Axes[i].Size
		dev /= m.Axes[i].Size
	}
	return c
}

// Device returns the device at a mesh coordinate.
func (m *Mesh) Device(coord []int) int {
	d := 0
	for i, a := range m.Axes {
		d = d*a.Size + coord[i]
	}
	return d
}

// Group returns the devices that share dev's coordinates on every axis but
// the given ones, in row-major order of their coordinates on those axes
// (the ring order of a collective over them). Over one axis, dev's position
// in the group is its own coordinate on that axis; a group may span
// several axes (2.5D and 3D algorithms need that).
func (m *Mesh) Group(dev int, axes ...int) []int {
	c := m.Coord(dev)
	out := []int{}
	var walk func(k int)
	walk = func(k int) {
		if k == len(axes) {
			out = append(out, m.Device(c))
			return
		}
		a := axes[k]
		for i := 0; i < m.Axes[a].Size; i++ {
			c[a] = i
			walk(k + 1)
		}
	}
	walk(0)
	return out
}

// Groups lists every group over axis, each in ring order.
func (m *Mesh) Groups(axis int) [][]int {
	var out [][]int
	for d := 0; d < m.Size(); d++ {
		if m.Coord(d)[axis] == 0 {
			out = append(out, m.Group(d, axis))
		}
	}
	return out
}

func (m *Mesh) String() string {
	parts := make([]string, len(m.Axes))
	for i, a := range m.Axes {
		parts[i] = fmt.Sprintf("%s=%d", a.Name, a.Size)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// CoordString renders a device coordinate as "(dp=1, tp=2)".
func (m *Mesh) CoordString(dev int) string {
	c := m.Coord(dev)
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = fmt.Sprintf("%s=%d", m.Axes[i].Name, v)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Split returns the offset and length of shard r when n elements are split
// into p balanced shards: the first n mod p shards get one element more.
func Split(n, p, r int) (off, length int) {
	q, rem := n/p, n%p
	if r < rem {
		return r * (q + 1), q + 1
	}
	return rem*(q+1) + (r-rem)*q, q
}
