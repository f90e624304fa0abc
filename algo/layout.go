package algo

import (
	"slices"

	"github.com/meshrun/meshrun/mesh"
)

// Operand names a matrix of Y = X·W.
type Operand byte

const (
	X Operand = 'X'
	W Operand = 'W'
	Y Operand = 'Y'
)

// Rect is rows [R0, R0+NR) × columns [C0, C0+NC) of a matrix.
type Rect struct{ R0, NR, C0, NC int }

// Block is a rectangle of an operand and the devices that hold it (more
// than one when it is replicated, as W over 2.5D's depth or X in 1D
// column).
type Block struct {
	Rect
	Devices []int
}

// shape is the rows and columns of an operand.
func (g GEMM) shape(o Operand) (int, int) {
	switch o {
	case X:
		return g.M, g.K
	case W:
		return g.K, g.N
	}
	return g.M, g.N
}

// sub is block r of [off, off+n) cut p ways.
func sub(off, n, p, r int) (int, int) {
	o, l := mesh.Split(n, p, r)
	return off + o, l
}

// Held is the rectangle of operand o device dev holds on layout l (Y as
// the algorithm leaves it: whole on every device after 1D row's
// all-reduce).
func (g GEMM) Held(l Layout, o Operand, dev int) Rect {
	rows, cols := g.shape(o)
	co := l.Mesh().Coord(dev)
	q := l.Q
	switch l.Kind {
	case OneDColumn:
		if o == X {
			return Rect{0, rows, 0, cols}
		}
		c0, nc := sub(0, cols, q, co[0])
		return Rect{0, rows, c0, nc}
	case OneDRow:
		switch o {
		case X:
			c0, nc := sub(0, cols, q, co[0])
			return Rect{0, rows, c0, nc}
		case W:
			r0, nr := sub(0, rows, q, co[0])
			return Rect{r0, nr, 0, cols}
		}
		return Rect{0, rows, 0, cols}
	case TwoD, TwoHalfD:
		dk, i, j := 0, co[0], co[1]
		d := 1
		if l.Kind == TwoHalfD {
			dk, i, j, d = co[0], co[1], co[2], l.D
		}
		if o == W { // rows i, columns j, on every depth layer
			r0, nr := sub(0, rows, q, i)
			c0, nc := sub(0, cols, q, j)
			return Rect{r0, nr, c0, nc}
		}
		r0, nr := sub(0, rows, d, dk)
		r0, nr = sub(r0, nr, q, i)
		c0, nc := sub(0, cols, q, j)
		return Rect{r0, nr, c0, nc}
	}
	// 3D (par.linear_3d): rows cut along an outer axis then along z, X's
	// outer axis x and its columns along y, W's and Y's outer axis y and
	// their columns along x
	a, b, c := co[0], co[1], co[2]
	rb, cb := b, a
	if o == X {
		rb, cb = a, b
	}
	r0, nr := sub(0, rows, q, rb)
	r0, nr = sub(r0, nr, q, c)
	c0, nc := sub(0, cols, q, cb)
	return Rect{r0, nr, c0, nc}
}

// Blocks lists the distinct rectangles of operand o and their holders, in
// order of their first holder; empty rectangles are left out.
func (g GEMM) Blocks(l Layout, o Operand) []Block {
	var out []Block
	for d := range l.Devices() {
		r := g.Held(l, o, d)
		if r.NR == 0 || r.NC == 0 {
			continue
		}
		i := slices.IndexFunc(out, func(b Block) bool { return b.Rect == r })
		if i < 0 {
			out = append(out, Block{Rect: r})
			i = len(out) - 1
		}
		out[i].Devices = append(out[i].Devices, d)
	}
	return out
}
