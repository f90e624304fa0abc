package sbp

import (
	"slices"

	"github.com/meshrun/meshrun/mesh"
)

// Block is the part of a logical tensor that one device holds: Off[i] and
// Len[i] per tensor dim. Partial lists the mesh axes over which the device's
// values are partial.
type Block struct {
	Off, Len []int
	Partial  []int
}

// Numel is the number of elements in the block.
func (b Block) Numel() int {
	n := 1
	for _, l := range b.Len {
		n *= l
	}
	return n
}

// Layout returns the block of a tensor of the given global shape that device
// dev of m holds under placement p. Mesh axes split in order: axis 0 first,
// then each later axis splits what the earlier ones left (the hierarchical
// layout of nd-SBP).
func Layout(m *mesh.Mesh, shape []int, p NdSBP, dev int) Block {
	coord := m.Coord(dev)
	b := Block{Off: make([]int, len(shape)), Len: append([]int(nil), shape...)}
	for a, s := range p {
		switch s.Kind {
		case Split:
			off, l := mesh.Split(b.Len[s.Dim], m.Axes[a].Size, coord[a])
			b.Off[s.Dim] += off
			b.Len[s.Dim] = l
		case Partial:
			b.Partial = append(b.Partial, a)
		}
	}
	return b
}

// LocalNumel is Layout(m, shape, p, dev).Numel() for the device at coord,
// without allocating: the memory pass asks it once per instruction of
// every program it replays.
func LocalNumel(m *mesh.Mesh, shape []int, p NdSBP, coord []int) int {
	var buf [8]int
	l := append(buf[:0], shape...)
	for a, s := range p {
		if s.Kind == Split {
			_, l[s.Dim] = mesh.Split(l[s.Dim], m.Axes[a].Size, coord[a])
		}
	}
	n := 1
	for _, d := range l {
		n *= d
	}
	return n
}

// LocalShape is the shape of the block a device holds.
func LocalShape(m *mesh.Mesh, shape []int, p NdSBP, dev int) []int {
	return Layout(m, shape, p, dev).Len
}

// MaxLocalNumel is the largest block over all devices. Shard 0 of a balanced
// split is never smaller than any other, so device 0 holds the largest block.
func MaxLocalNumel(m *mesh.Mesh, shape []int, p NdSBP) int {
	return Layout(m, shape, p, 0).Numel()
}

// Uniform reports whether every device's block of the tensor has the same
// shape (no axis is marked by MarkVarying). Then a block's shape, and so
// its bytes, are computed once instead of once per device of a large mesh.
func Uniform(m *mesh.Mesh, shape []int, p NdSBP) bool {
	varying := make([]bool, len(m.Axes))
	MarkVarying(m, shape, p, varying)
	return !slices.Contains(varying, true)
}

// MarkVarying sets varying[a] for every mesh axis a whose coordinate can
// change the shape of a device's block: along each dim, the splits before
// the first one that does not divide the length left are the same on
// every device; from that one on, each splitting axis's coordinate counts.
// Devices that agree on the marked axes hold blocks of the same shape.
func MarkVarying(m *mesh.Mesh, shape []int, p NdSBP, varying []bool) {
	l := append([]int(nil), shape...)
	uneven := make([]bool, len(shape))
	for a, s := range p {
		if s.Kind != Split {
			continue
		}
		n := m.Axes[a].Size
		if uneven[s.Dim] || l[s.Dim]%n != 0 {
			uneven[s.Dim], varying[a] = true, true
			continue
		}
		l[s.Dim] /= n
	}
}
