package sbp

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"

	"github.com/meshrun/meshrun/mesh"
)

// Collective names the data movement of one boxing step.
type Collective string

const (
	AllGather     Collective = "all_gather"     // S(i) → B
	AllReduce     Collective = "all_reduce"     // P → B
	ReduceScatter Collective = "reduce_scatter" // P → S(i)
	AllToAll      Collective = "all_to_all"     // S(i) → S(j)
	LocalSlice    Collective = "slice"          // B → S(i), no communication
	LocalPartial  Collective = "make_partial"   // B → P and S(i) → P, no communication
	// The local view's rooted collectives (never chosen by boxing): the
	// root's block to every member, and the sum to the root (zeros on
	// the others). Both run as binomial trees.
	RootBroadcast Collective = "broadcast"
	RootReduce    Collective = "reduce"
)

// Communicates reports whether the step sends data between devices.
func (c Collective) Communicates() bool {
	return c != LocalSlice && c != LocalPartial
}

// Step is one single-axis conversion.
type Step struct {
	Axis     int
	From, To NdSBP
	Kind     Collective
	Reduce   Reduce  // of the partial values reduced or made
	Root     int     // Broadcast and Reduce: the root's index in the group
	Bytes    float64 // bytes sent by the busiest device (the model's figure)
	Time     float64 // modelled seconds
}

// Path is a whole conversion: steps applied in order.
type Path struct {
	From, To NdSBP
	Steps    []Step
	Bytes    float64
	Time     float64
}

// Describe renders the steps, e.g. "all_gather over tp {S(0), S(1)} → {S(0), B}".
func (s Step) Describe(m *mesh.Mesh) string {
	return fmt.Sprintf("%s over %s %s → %s", s.Kind, m.Axes[s.Axis].Name, s.From, s.To)
}

// StepKind is the boxing table: which collective converts x to y on one axis.
// ok is false when no single step does (P(sum) ↔ P(max)).
func StepKind(x, y SBP) (c Collective, red Reduce, ok bool) {
	switch {
	case x == y:
		return "", 0, false
	case x.IsS() && y.IsB():
		return AllGather, 0, true
	case x.IsP() && y.IsB():
		return AllReduce, x.Reduce, true
	case x.IsP() && y.IsS():
		return ReduceScatter, x.Reduce, true
	case x.IsS() && y.IsS():
		return AllToAll, 0, true
	case x.IsB() && y.IsS():
		return LocalSlice, 0, true
	case (x.IsB() || x.IsS()) && y.IsP():
		return LocalPartial, y.Reduce, true
	}
	return "", 0, false
}

// Legal reports whether axis a of placement cur can change to y in one step.
// A device's block is split by axes in order, so an axis may only change how
// it splits dim d when no later axis also splits d: otherwise the later
// axis's sub-blocks would interleave and the step's result would not be a
// block of any placement.
func Legal(cur NdSBP, a int, y SBP) bool {
	later := func(d int) bool {
		for b := a + 1; b < len(cur); b++ {
			if cur[b].IsS() && cur[b].Dim == d {
				return true
			}
		}
		return false
	}
	x := cur[a]
	if x.IsS() && later(x.Dim) {
		return false
	}
	if y.IsS() && later(y.Dim) {
		return false
	}
	return true
}

// StepCost prices a step with the alpha-beta-gamma model. G is the bytes of
// the block the group holds together (the device block with the axis's split
// removed); p the group size.
func StepCost(m *mesh.Mesh, topo *mesh.Topology, shape []int, elem int, cur NdSBP, a int, kind Collective) (bytes, secs float64) {
	p := float64(m.Axes[a].Size)
	if p == 1 || !kind.Communicates() {
		return 0, 0
	}
	l := topo.Link(a)
	grp := cur.Clone()
	grp[a] = B
	G := float64(MaxLocalNumel(m, shape, grp) * elem)
	L := float64(MaxLocalNumel(m, shape, cur) * elem)
	f := (p - 1) / p
	switch kind {
	case AllGather:
		bytes = f * G
		secs = (p-1)*l.Alpha + bytes*l.Beta
	case ReduceScatter:
		bytes = f * G
		secs = (p-1)*l.Alpha + bytes*(l.Beta+l.Gamma)
	case AllReduce:
		bytes = 2 * f * G
		secs = 2*(p-1)*l.Alpha + bytes*l.Beta + f*G*l.Gamma
	case AllToAll:
		bytes = f * L
		secs = (p-1)*l.Alpha + bytes*l.Beta
	case RootBroadcast: // binomial tree: the root sends lg p copies
		rounds := float64(bits.Len(uint(p) - 1))
		bytes = rounds * L
		secs = rounds * (l.Alpha + L*l.Beta)
	case RootReduce: // the tree backwards: every member but the root sends once
		rounds := float64(bits.Len(uint(p) - 1))
		bytes = L
		secs = rounds * (l.Alpha + L*(l.Beta+l.Gamma))
	}
	return bytes, secs
}

// Planner finds cheapest conversions and remembers them.
type Planner struct {
	Mesh  *mesh.Mesh
	Topo  *mesh.Topology
	cache map[string]*Path
	key   []byte // Plan's key, reused: like the cache, not for concurrent use
}

// NewPlanner makes a planner for a mesh and its links.
func NewPlanner(m *mesh.Mesh, topo *mesh.Topology) *Planner {
	if topo == nil {
		topo = mesh.Uniform(m, mesh.DefaultLink)
	}
	return &Planner{Mesh: m, Topo: topo, cache: map[string]*Path{}}
}

// Plan returns the cheapest sequence of single-axis steps from one placement
// to another: Dijkstra over placements, where the per-axis values considered
// are B and the values that appear in either end (other values never help).
// Ties go to fewer steps, then to the first found in axis order.
func (pl *Planner) Plan(shape []int, elem int, from, to NdSBP) (*Path, error) {
	pl.key = planKey(pl.key[:0], shape, elem, from, to)
	if p, ok := pl.cache[string(pl.key)]; ok { // looked up without a copy
		return p, nil
	}
	p, err := pl.plan(shape, elem, from, to)
	if err == nil {
		pl.cache[string(pl.key)] = p
	}
	return p, err
}

// planKey appends Plan's cache key to b: the shape, element size and both
// placements as self-delimiting varints. Plan is asked once per candidate
// signature's argument, tens of thousands of times for a deep model, and
// formatting the key with fmt cost more than finding the cached path.
func planKey(b []byte, shape []int, elem int, from, to NdSBP) []byte {
	b = binary.AppendUvarint(b, uint64(len(shape)))
	for _, d := range shape {
		b = binary.AppendVarint(b, int64(d))
	}
	b = binary.AppendVarint(b, int64(elem))
	for _, p := range []NdSBP{from, to} {
		b = binary.AppendUvarint(b, uint64(len(p)))
		for _, s := range p {
			b = append(b, byte(s.Kind), byte(s.Reduce))
			b = binary.AppendVarint(b, int64(s.Dim))
		}
	}
	return b
}

type node struct {
	state NdSBP
	time  float64
	steps int
	prev  int
	step  Step
	done  bool
}

func (pl *Planner) plan(shape []int, elem int, from, to NdSBP) (*Path, error) {
	m := pl.Mesh
	if len(from) != m.NumAxes() || len(to) != m.NumAxes() {
		return nil, fmt.Errorf("placement %s or %s does not match mesh %s", from, to, m)
	}
	vals := []SBP{B}
	add := func(s SBP) {
		for _, v := range vals {
			if v == s {
				return
			}
		}
		vals = append(vals, s)
	}
	for _, s := range append(from.Clone(), to...) {
		add(s)
	}
	nodes := []*node{{state: from.Clone(), prev: -1}}
	index := map[string]int{from.String(): 0}
	for {
		best := -1
		for i, n := range nodes {
			if n.done {
				continue
			}
			if best < 0 || Cheaper(n.time, nodes[best].time) || (SameCost(n.time, nodes[best].time) && n.steps < nodes[best].steps) {
				best = i
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("no boxing path from %s to %s", from, to)
		}
		cur := nodes[best]
		cur.done = true
		if cur.state.Equal(to) {
			path := &Path{From: from.Clone(), To: to.Clone(), Time: cur.time}
			for i := best; nodes[i].prev >= 0; i = nodes[i].prev {
				path.Steps = append([]Step{nodes[i].step}, path.Steps...)
				path.Bytes += nodes[i].step.Bytes
			}
			return path, nil
		}
		for a := 0; a < m.NumAxes(); a++ {
			for _, y := range vals {
				kind, red, ok := StepKind(cur.state[a], y)
				if !ok || !Legal(cur.state, a, y) {
					continue
				}
				bytes, secs := StepCost(m, pl.Topo, shape, elem, cur.state, a, kind)
				next := cur.state.Clone()
				next[a] = y
				st := Step{Axis: a, From: cur.state.Clone(), To: next, Kind: kind, Reduce: red, Bytes: bytes, Time: secs}
				k := next.String()
				t := cur.time + secs
				if i, seen := index[k]; seen {
					n := nodes[i]
					if !n.done && (Cheaper(t, n.time) || (SameCost(t, n.time) && cur.steps+1 < n.steps)) {
						n.time, n.steps, n.prev, n.step = t, cur.steps+1, best, st
					}
					continue
				}
				index[k] = len(nodes)
				nodes = append(nodes, &node{state: next, time: t, steps: cur.steps + 1, prev: best, step: st})
			}
		}
	}
}

// SameCost treats modelled times within a relative 1e-9 as equal, so that
// float rounding never decides between plans the model prices the same
// (an all-reduce and a reduce-scatter followed by an all-gather).
func SameCost(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(a, b, 1e-30)
}

// Cheaper reports a < b beyond rounding.
func Cheaper(a, b float64) bool { return a < b && !SameCost(a, b) }

// Describe renders a path as its steps joined by "; ".
func (p *Path) Describe(m *mesh.Mesh) string {
	parts := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		parts[i] = s.Describe(m)
	}
	return strings.Join(parts, "; ")
}
