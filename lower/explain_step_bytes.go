package lower

import (
	"encoding/binary"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// The bytes explain lists for an inserted conversion's step are what the
// busiest device sends in it by the runtime's algorithms (rt/comm_shm.go,
// rt/comm_shm_report.go): a ring all-gather forwards every block of its
// group but its successor's, a ring reduce-scatter every chunk but its
// own, a ring all-reduce the two phases over balanced chunks of the flat
// block, a pairwise all-to-all every piece but its own. Where every
// device's blocks are equal (and an all-reduce's block divides into equal
// chunks) that is the link model's figure, (p−1)/p of the group's bytes
// (twice for an all-reduce); on uneven blocks the busiest device sends
// more, and the model's figure is not even a whole number of bytes.

// stepBytes is the busiest device's bytes in boxing step st of value v.
// Uneven steps are counted group by group and remembered in seen by their
// shape, dtype and step (a deep or pipelined model repeats them per layer
// and micro-batch).
func stepBytes(m *mesh.Mesh, v *ir.Value, st sbp.Step, seen map[string]float64) float64 {
	if !st.Kind.Communicates() {
		return 0
	}
	shape, elem := v.Type.Shape, v.Type.DType.Size()
	if !evenLayout(m, shape, st.From) || !evenLayout(m, shape, st.To) {
		k := stepKey(shape, elem, st)
		b, ok := seen[k]
		if !ok {
			b = float64(busiestStep(m, shape, elem, st))
			seen[k] = b
		}
		return b
	}
	if st.Kind == sbp.AllReduce {
		// every device holds n elements: the ring's chunks are alike in
		// every group, and uneven when p does not divide n
		n := sbp.LocalNumel(m, shape, st.From, make([]int, m.NumAxes()))
		return ringAllReduceBytes(n, m.Axes[st.Axis].Size) * float64(elem)
	}
	return st.Bytes
}

// stepKey identifies an uneven step for stepBytes's memory.
func stepKey(shape []int, elem int, st sbp.Step) string {
	b := make([]byte, 0, 64)
	for _, n := range shape {
		b = binary.AppendVarint(b, int64(n))
	}
	b = append(b, byte(elem), byte(st.Axis))
	b = append(append(b, st.Kind...), 0)
	for _, pl := range []sbp.NdSBP{st.From, st.To} {
		for _, e := range pl {
			b = append(b, byte(e.Kind), byte(e.Reduce))
			b = binary.AppendVarint(b, int64(e.Dim))
		}
	}
	return string(b)
}

// busiestStep is the most any device sends in st, group by group.
func busiestStep(m *mesh.Mesh, shape []int, elem int, st sbp.Step) int64 {
	var most int64
	for d := range m.Size() {
		if m.Coord(d)[st.Axis] == 0 { // one pass per group, from its first member
			most = max(most, groupStepBytes(m, shape, st, groupAlong(m, st.Axis, d))*int64(elem))
		}
	}
	return most
}

// groupStepBytes is the most elements a member of the group sends in st.
func groupStepBytes(m *mesh.Mesh, shape []int, st sbp.Step, members []int) int64 {
	p := len(members)
	blocks := make([][]int, p) // each member's block before the step
	for i, d := range members {
		blocks[i] = sbp.Layout(m, shape, st.From, d).Len
	}
	// lens: each member's length along dim under pl
	lens := func(pl sbp.NdSBP, dim int) []int64 {
		out := make([]int64, p)
		for i, d := range members {
			out[i] = int64(sbp.Layout(m, shape, pl, d).Len[dim])
		}
		return out
	}
	// others is the product of a block's dims but dim: a row's size
	others := func(b []int, dim int) int64 {
		n := int64(1)
		for i, l := range b {
			if i != dim {
				n *= int64(l)
			}
		}
		return n
	}
	var ls []int64
	switch st.Kind {
	case sbp.AllGather:
		ls = lens(st.From, st.From[st.Axis].Dim)
	case sbp.ReduceScatter, sbp.AllToAll:
		ls = lens(st.To, st.To[st.Axis].Dim)
	}
	var most int64
	for r, in := range blocks {
		var elems int64
		switch st.Kind {
		case sbp.AllGather: // in step k, block r−k
			for k := 0; k < p-1; k++ {
				elems += ls[mod(r-k, p)] * others(in, st.From[st.Axis].Dim)
			}
		case sbp.ReduceScatter: // in step k, chunk r−k−1
			for k := 0; k < p-1; k++ {
				elems += ls[mod(r-k-1, p)] * others(in, st.To[st.Axis].Dim)
			}
		case sbp.AllReduce: // both phases over balanced chunks of the block
			elems = ringAllReduceSends(others(in, -1), int64(p), int64(r))
		case sbp.AllToAll: // every piece but its own
			dim := st.To[st.Axis].Dim
			elems = (int64(in[dim]) - ls[r]) * others(in, dim)
		}
		most = max(most, elems)
	}
	return most
}

// evenLayout reports whether every split of pl, axis after axis, divides
// what it splits exactly: every device's block is then alike.
func evenLayout(m *mesh.Mesh, shape []int, pl sbp.NdSBP) bool {
	var buf [8]int
	l := append(buf[:0], shape...)
	for a, s := range pl {
		if s.Kind != sbp.Split {
			continue
		}
		n := m.Axes[a].Size
		if l[s.Dim]%n != 0 {
			return false
		}
		l[s.Dim] /= n
	}
	return true
}

// groupAlong lists the devices that differ from d only along axis a, in
// that axis's order.
func groupAlong(m *mesh.Mesh, a, d int) []int {
	c := m.Coord(d)
	out := make([]int, m.Axes[a].Size)
	for i := range out {
		c[a] = i
		out[i] = m.Device(c)
	}
	return out
}

func mod(a, n int) int { return ((a % n) + n) % n }
