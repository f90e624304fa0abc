package lower

// The bucket pass: all-reduces over one group that do not depend on each
// other are launched together (DDP's gradient buckets, XLA's all-reduce
// combiner). A training step ends with an all-reduce per parameter
// gradient over the data axis, and often one more over the model axis;
// each pays the link's latency 2(p−1) times, and on the local launcher a
// meeting of the group. In a bucket the latency is paid once. Adjacent
// reduce-scatters, or all-gathers, over one group share a bucket too
// (ZeRO's gradients and parameters, DeepSpeed's reduce and all-gather
// buckets), but only where they already run one after the other.
//
// Per program, in order, each all-reduce joins the open bucket of its
// group, dtype and reduction unless that would pass the byte cap or the
// all-reduce depends on the bucket: on one of its members, or on a bucket
// that does (the buckets a value depends on are tracked through every
// instruction, an instruction that writes over an argument depending on
// that argument's other readers, and a bucket depends on what any member
// depends on, so joining never makes a cycle). Otherwise it opens a new
// bucket. The program is then ordered again, a topological order that
// keeps the original one wherever it can: each bucket runs where its last member's
// argument is ready, and what reads a member's result moves after the
// bucket. A result written into an argument's buffer (donation) stays
// after every other reader of that argument. The members run next to each
// other, the later ones marked Joins (plan/bucket.go), and every member's
// argument is freed at the bucket's end, when a launch of them all ends.
//
// What may move: only the tail of the program after its last send,
// receive, pipeline action or collective over a group whose ranks run
// different programs (the pipeline's stages), so that the ranks that
// meet in any group still run the same instructions in the same order.

import (
	"container/heap"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// DefaultBucketBytes is a bucket's cap of bytes per device, PyTorch DDP's
// default (bucket_cap_mb = 25).
const DefaultBucketBytes = 25 << 20

// bucketCap is the plan's cap of a bucket's bytes per device.
func (p *Plan) bucketCap() int64 {
	if p.Opts.BucketBytes > 0 {
		return p.Opts.BucketBytes
	}
	return DefaultBucketBytes
}

func bucketAllReduces(p *Plan) error {
	if p.Opts.NoBucket {
		return nil
	}
	limit := p.bucketCap()
	ex := p.Exec
	internal := internalGroups(ex)
	// InstrValue follows the program while it is the only one
	vals := p.Pipe == nil && len(ex.Programs) == 1 && len(p.InstrValue) == len(ex.Programs[0].Instrs)
	budget := p.Opts.Memory
	before := p.Peak // the Adam fusion's replay, when it made one
	if before == nil && budget > 0 {
		before = ex.Peaks()
	}
	var was [][]plan.Instr // with a budget, what to put back (withinBudget)
	var wasVals []*ir.Value
	if budget > 0 {
		was = make([][]plan.Instr, len(ex.Programs))
		wasVals = slices.Clone(p.InstrValue)
	}
	changed := false
	for pi, prog := range ex.Programs {
		var iv []*ir.Value
		if vals {
			iv = p.InstrValue
		}
		if budget > 0 {
			was[pi] = slices.Clone(prog.Instrs)
		}
		if bucketProgram(ex, prog, internal, limit, iv) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	p.Peak = nil // the memory pass replays the programs again
	if budget > 0 {
		p.Peak = ex.Peaks()
		if withinBudget(ex, budget, before, p.Peak, was) {
			if vals {
				copy(p.InstrValue, wasVals)
			}
			p.Peak = ex.Peaks()
		}
	}
	if p.HostPeak != nil {
		p.HostPeak = ex.HostPeaks()
	}
	return nil
}

// withinBudget puts back the instructions (was) of every program one of
// whose ranks fitted the memory budget before the buckets and does not
// after: a bucket keeps its members' arguments until its end and moves
// what reads their results after it, which may hold more at once. Without
// a budget buckets trade that memory for time, as DDP's do; the peaks
// count it. It reports whether it put any back.
func withinBudget(ex *plan.Plan, budget int64, before, after []int64, was [][]plan.Instr) bool {
	back := false
	for pi, prog := range ex.Programs {
		for r := range after {
			if ex.ProgramOf(r) == prog && after[r] > budget && before[r] <= budget {
				prog.Instrs = was[pi]
				back = true
				break
			}
		}
	}
	return back
}

// internalGroups says, per group, whether every instance of it has
// members that all run one program.
func internalGroups(ex *plan.Plan) []bool {
	out := make([]bool, len(ex.Groups))
	for g := range ex.Groups {
		out[g] = true
		if ex.RankProgram == nil {
			continue
		}
		for r := 0; r < ex.Mesh.Size() && out[g]; r++ {
			for _, m := range ex.Mesh.Group(r, ex.Groups[g].Axes...) {
				if ex.RankProgram[m] != ex.RankProgram[r] {
					out[g] = false
					break
				}
			}
		}
	}
	return out
}

// bucketKey is what the collectives of one bucket share.
type bucketKey struct {
	kind        sbp.Collective
	group, axis int
	dtype       ir.DType
	reduce      sbp.Reduce
}

type bucket struct {
	members []int   // instruction indices, in order
	bytes   int64   // the members' blocks, on the device with the most
	deps    []int32 // the buckets any member depends on (that mattered then)
	// closed: a later bucket of its key was opened, so nothing joins it;
	// dead: closed, and it reaches no open bucket, so it never matters
	closed, dead bool
}

// bucketProgram buckets prog's all-reduces and orders it again (vals, when
// given, follows), reporting whether any bucket has two members.
func bucketProgram(ex *plan.Plan, prog *plan.Program, internal []bool, limit int64, vals []*ir.Value) bool {
	start := movableFrom(prog, internal)
	prod, ok := producers(prog)
	if !ok {
		return false
	}
	readers := donatedReaders(prog, start)
	buckets, of := formBuckets(ex, prog, internal, limit, start, prod, readers)
	if buckets == nil {
		return false
	}
	// nothing before the first bucket's first member moves: the order
	// starts there
	first := len(prog.Instrs)
	for _, b := range buckets {
		if len(b.members) > 1 {
			first = min(first, b.members[0])
		}
	}
	start = first
	order := bucketOrder(prog, start, prod, readers, buckets, of)
	if len(order) != len(prog.Instrs)-start {
		panic("bucket: the buckets' dependences have a cycle")
	}
	// only the tail moves: it alone is copied, and only its frees change
	// (a slot it reads is last read in it; one it does not read keeps
	// its free before it)
	tail := make([]plan.Instr, len(order))
	var iv []*ir.Value
	if vals != nil {
		iv = make([]*ir.Value, len(order))
	}
	for k, i := range order {
		tail[k] = prog.Instrs[i]
		tail[k].Joins = of[i] >= 0 && buckets[of[i]].members[0] != i
		if vals != nil {
			iv[k] = vals[i]
		}
	}
	copy(prog.Instrs[start:], tail)
	if vals != nil {
		copy(vals[start:], iv)
	}
	freeAfterLastUseFrom(prog, start)
	return true
}

// movableFrom is the first instruction of prog's tail that the pass may
// reorder: the one after the last send, receive, pipeline action or
// collective over a group whose members run different programs.
func movableFrom(prog *plan.Program, internal []bool) int {
	for i := len(prog.Instrs) - 1; i >= 0; i-- {
		in := &prog.Instrs[i]
		switch {
		case in.Kind == plan.Send, in.Kind == plan.Recv, in.Kind == plan.Mark, in.Act != nil,
			in.Kind == plan.Collective && !internal[in.Group]:
			return i + 1
		}
	}
	return 0
}

// producers is the instruction that writes each slot; false when a slot
// is written twice (the reordering assumes one writer).
func producers(prog *plan.Program) ([]int32, bool) {
	prod := make([]int32, prog.NumSlots())
	for i := range prod {
		prod[i] = -1
	}
	ok := true
	for i := range prog.Instrs {
		prog.Instrs[i].Written(func(s int) {
			if prod[s] >= 0 {
				ok = false
			}
			prod[s] = int32(i)
		})
	}
	return prod, ok
}

// bucketable says whether in may share a launch: an all-reduce,
// reduce-scatter or all-gather in device memory over a group of more than
// one rank whose members run one program.
func bucketable(ex *plan.Plan, in *plan.Instr, internal []bool) bool {
	if in.Kind != plan.Collective || !plan.Bucketable(in.Step.Kind) || in.Host || !internal[in.Group] {
		return false
	}
	size := 1
	for _, a := range ex.Groups[in.Group].Axes {
		size *= ex.Mesh.Axes[a].Size
	}
	return size > 1
}

// formBuckets groups the bucketable all-reduces from start on; of maps
// each instruction to its bucket (-1: none). Nil when no bucket has two
// members.
//
// What an instruction depends on is kept as the buckets it reaches that
// may still matter: open ones (a later all-reduce may join them) and
// closed ones that reach an open one. A closed bucket that reaches none
// never will (its deps no longer grow, and a closed bucket stays closed),
// so it is dropped for good: the sets stay as small as the open buckets,
// where keeping every bucket made a deep model's tail quadratic (each
// layer's all-reduce depends on all the earlier ones').
func formBuckets(ex *plan.Plan, prog *plan.Program, internal []bool, limit int64, start int, prod []int32, readers map[int][]int) ([]*bucket, []int32) {
	n := len(prog.Instrs)
	of := make([]int32, n)
	for i := range of {
		of[i] = -1
	}
	deps := make([][]int32, n) // the buckets each instruction depends on that may matter
	f := &former{}
	open := map[bucketKey]int32{}
	shared := false
	for i := start; i < n; i++ {
		in := &prog.Instrs[i]
		var d []int32
		follows(prog, i, start, prod, readers, func(j int) { // i depends on j's bucket and on what j depends on
			if b := of[j]; b >= 0 {
				d = addBucket(d, b)
			}
			for _, b := range deps[j] {
				d = addBucket(d, b)
			}
		})
		d = f.live(d)
		deps[i] = d
		if !bucketable(ex, in, internal) {
			continue
		}
		key := bucketKey{in.Step.Kind, in.Group, in.Step.Axis, in.DType, in.Step.Reduce}
		size := int64(sbp.MaxLocalNumel(ex.Mesh, in.Shape, in.ArgPlace[0])) * int64(in.DType.Size())
		// a reduce-scatter or all-gather joins only the bucket of the
		// instruction right before it, so that nothing moves: ZeRO's point
		// is memory, and moving its gathers together would gather every
		// parameter at once
		adjacent := in.Step.Kind == sbp.AllReduce || (i > start && of[i-1] >= 0 && of[i-1] == open[key])
		if b, ok := open[key]; ok && adjacent && f.b[b].bytes+size <= limit && !f.dependsOn(d, b) {
			bk := f.b[b]
			bk.members = append(bk.members, i)
			bk.bytes += size
			for _, x := range d {
				bk.deps = addBucket(bk.deps, x)
			}
			of[i] = b
			shared = true
			continue
		}
		if b, ok := open[key]; ok {
			f.b[b].closed = true
		}
		open[key] = int32(len(f.b))
		of[i] = int32(len(f.b))
		f.b = append(f.b, &bucket{members: []int{i}, bytes: size, deps: slices.Clone(d)})
	}
	if !shared {
		return nil, nil
	}
	for i := range of { // a bucket of one is an instruction like any other
		if b := of[i]; b >= 0 && len(f.b[b].members) < 2 {
			of[i] = -1
		}
	}
	return f.b, of
}

// former is formBuckets's buckets. seen and gen mark the buckets one walk
// (reachesOpen, dependsOn) has visited: a walk per bucketable instruction
// and per closed dependence, where a map per walk was an allocation each.
type former struct {
	b    []*bucket
	seen []uint32 // per bucket: the walk that last visited it
	gen  uint32
}

// walk starts a walk over the buckets (first then tells its visits).
func (f *former) walk() {
	if len(f.seen) < len(f.b) {
		f.seen = append(f.seen, make([]uint32, len(f.b)-len(f.seen))...)
	}
	f.gen++
}

// first reports whether the walk visits bucket x for the first time.
func (f *former) first(x int32) bool {
	if f.seen[x] == f.gen {
		return false
	}
	f.seen[x] = f.gen
	return true
}

// live keeps of d the buckets that are open or reach an open one (d is
// the caller's, rewritten).
func (f *former) live(d []int32) []int32 {
	out := d[:0]
	for _, x := range d {
		if !f.b[x].closed || f.reachesOpen(x) {
			out = append(out, x)
		}
	}
	return out
}

// reachesOpen says whether closed bucket x depends, through closed
// buckets, on an open one; when it does not, it and every bucket the walk
// saw are marked dead.
func (f *former) reachesOpen(x int32) bool {
	if f.b[x].dead {
		return false
	}
	var seen []int32
	stack := []int32{x}
	f.walk()
	for len(stack) > 0 {
		y := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.b[y].dead || !f.first(y) {
			continue
		}
		if !f.b[y].closed {
			return true
		}
		seen = append(seen, y)
		stack = append(stack, f.b[y].deps...)
	}
	for _, y := range seen {
		f.b[y].dead = true
	}
	return false
}

// addBucket adds b to the set d (kept sorted).
func addBucket(d []int32, b int32) []int32 {
	k, found := slices.BinarySearch(d, b)
	if found {
		return d
	}
	return slices.Insert(d, k, b)
}

// dependsOn says whether something that depends on the buckets d depends
// on bucket b, directly or through the buckets they depend on.
func (f *former) dependsOn(d []int32, b int32) bool {
	f.walk()
	stack := slices.Clone(d)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == b {
			return true
		}
		if f.b[x].dead || !f.first(x) {
			continue
		}
		stack = append(stack, f.b[x].deps...)
	}
	return false
}

// bucketOrder is the new order of the instructions from start on: a
// topological order with each bucket as one node, taking among the ready
// nodes the one that came first (a bucket: its first member).
func bucketOrder(prog *plan.Program, start int, prod []int32, readers map[int][]int, buckets []*bucket, of []int32) []int {
	n := len(prog.Instrs)
	node := func(i int) int { // a bucket's node is its first member
		if b := of[i]; b >= 0 {
			return buckets[b].members[0]
		}
		return i
	}
	succ := make([][]int32, n)
	indeg := make([]int, n)
	edge := func(from, to int) {
		from, to = node(from), node(to)
		if from != to {
			succ[from] = append(succ[from], int32(to))
			indeg[to]++
		}
	}
	for i := start; i < n; i++ {
		follows(prog, i, start, prod, readers, func(j int) { edge(j, i) })
	}
	order := make([]int, 0, n-start)
	ready := &indexHeap{}
	for i := start; i < n; i++ {
		if node(i) == i && indeg[i] == 0 {
			heap.Push(ready, i)
		}
	}
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		if b := of[i]; b >= 0 {
			order = append(order, buckets[b].members...)
		} else {
			order = append(order, i)
		}
		for _, s := range succ[i] {
			if indeg[s]--; indeg[s] == 0 {
				heap.Push(ready, int(s))
			}
		}
	}
	return order
}

// follows calls after with each instruction from start on that
// instruction i must run after: the producers of its arguments and, where
// it writes a result over an argument (donation), that argument's other
// readers before it (readers: donatedReaders from start or before).
// formBuckets and bucketOrder both order by it.
func follows(prog *plan.Program, i, start int, prod []int32, readers map[int][]int, after func(j int)) {
	in := &prog.Instrs[i]
	for _, a := range in.Args {
		if j := int(prod[a]); j >= start {
			after(j)
		}
	}
	for _, arg := range in.Donate {
		if arg < 0 {
			continue
		}
		for _, r := range readers[in.Args[arg]] {
			if r >= start && r < i {
				after(r)
			}
		}
	}
}

// donatedReaders maps each slot that an instruction from start on writes
// a result over (plan.Instr.Donate) to its readers from start on, in
// order: the donor must run after all the others.
func donatedReaders(prog *plan.Program, start int) map[int][]int {
	readers := map[int][]int{}
	for i := start; i < len(prog.Instrs); i++ {
		in := &prog.Instrs[i]
		for _, arg := range in.Donate {
			if arg >= 0 {
				readers[in.Args[arg]] = nil
			}
		}
	}
	for i := start; i < len(prog.Instrs); i++ {
		for _, a := range prog.Instrs[i].Args {
			if rs, ok := readers[a]; ok {
				readers[a] = append(rs, i)
			}
		}
	}
	return readers
}

// indexHeap is a min-heap of instruction indices.
type indexHeap []int

func (h indexHeap) Len() int           { return len(h) }
func (h indexHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h indexHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *indexHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *indexHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
