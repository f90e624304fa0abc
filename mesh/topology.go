package mesh

import "fmt"

// Link is the alpha-beta-gamma model of the links inside one mesh axis:
// Alpha seconds of latency per message, Beta seconds per byte on the wire,
// Gamma seconds per byte reduced.
type Link struct {
	Alpha float64
	Beta  float64
	Gamma float64
}

// DefaultLink models an NVLink-class link: 5 µs latency, 100 GB/s, and
// reductions at 400 GB/s.
var DefaultLink = Link{Alpha: 5e-6, Beta: 1.0 / 100e9, Gamma: 1.0 / 400e9}

// Topology assigns a link model to every axis of a mesh.
type Topology struct {
	Links []Link
}

// Uniform gives every axis of m the same link.
func Uniform(m *Mesh, l Link) *Topology {
	t := &Topology{Links: make([]Link, m.NumAxes())}
	for i := range t.Links {
		t.Links[i] = l
	}
	return t
}

// Link returns the link model of an axis.
func (t *Topology) Link(axis int) Link {
	if t == nil || axis >= len(t.Links) {
		return DefaultLink
	}
	return t.Links[axis]
}

func (l Link) String() string {
	return fmt.Sprintf("alpha=%gus bandwidth=%gGB/s", l.Alpha*1e6, 1/l.Beta/1e9)
}
