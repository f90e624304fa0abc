// Package rt runs lowered programs: one goroutine per device of the mesh,
// each with its own memory (slots of tensors), exchanging data only through
// a Collectives implementation.
//
// Every device walks the same instruction list (package lower builds one
// per device with that device's local shapes). Source instructions build
// the device's block of an input or param; compute instructions call the
// backend's kernel on local blocks; box instructions run one boxing step:
// a collective within the device's group on one mesh axis, or a local slice
// or zero-fill. After each instruction the result's shape is checked against
// the plan, the slots whose last use it was are freed, and the memory
// accounting and the timeline are updated. A collective waits for its peers
// at most Options.Timeout; when any device fails, the others are cancelled
// and the first failure is reported with its device, op and source line.
package rt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// Options configure a run.
type Options struct {
	Seed    uint64
	Timeout time.Duration // per collective; 0 = 60s
	Backend *CPU          // nil = CPU with DefaultBLAS
	// Feed, when it returns a tensor, supplies a device's block of a source
	// instead of its initialiser: the trainer carries parameters and
	// optimizer states between steps and feeds per-step scalars this way.
	Feed func(dev int, v *lang.Value) *Tensor
	// stall makes a device wait for cancellation before running (tests of
	// the collective timeout).
	stall func(dev int) bool
	// files shares loaded .npy files between runs (the trainer's steps).
	files *npyCache
}

// Event is one entry of a device's timeline.
type Event struct {
	Name  string
	Kind  string // "source", "compute", "comm", "local"
	Start time.Duration
	Dur   time.Duration
	Bytes int64 // bytes this device sent
	Where string
}

// DeviceStats is what one device did.
type DeviceStats struct {
	Device    int
	Peak      int64 // bytes
	Final     int64 // bytes held at the end (the outputs)
	BytesSent int64
	Events    []Event
}

// Result is a finished run.
type Result struct {
	Names   []string
	Outputs []*Tensor   // logical tensors, in Plan.Outputs order
	Carry   [][]*Tensor // per device, per Plan.Carry: the blocks the next step starts from
	Devices []DeviceStats
	Wall    time.Duration
}

// Output returns the named output.
func (r *Result) Output(name string) *Tensor {
	for i, n := range r.Names {
		if n == name {
			return r.Outputs[i]
		}
	}
	return nil
}

// RunError is a fault on one device.
type RunError struct {
	Device int
	Coord  string
	Op     string
	Pos    lang.Pos
	Err    error
}

func (e *RunError) Error() string {
	return fmt.Sprintf("%s: device %d %s: %s: %v", lang.FormatPos(e.Pos), e.Device, e.Coord, e.Op, e.Err)
}

func (e *RunError) Unwrap() error { return e.Err }

// Run executes a plan on in-process devices.
func Run(ctx context.Context, p *lower.Plan, opts Options) (*Result, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Backend == nil {
		opts.Backend = &CPU{BLAS: DefaultBLAS()}
	}
	n := p.Mesh.Size()
	tr := NewChanTransport(n)
	coll := Ring{T: tr}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := &Result{Devices: make([]DeviceStats, n), Carry: make([][]*Tensor, n)}
	finals := make([][]*Tensor, n)
	errs := make([]error, n)
	cache := opts.files
	if cache == nil {
		cache = &npyCache{}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for d := 0; d < n; d++ {
		wg.Add(1)
		go func(d int) {
			defer wg.Done()
			dr := &deviceRun{plan: p, prog: p.Programs[d], opts: &opts, coll: coll, cache: cache, start: start}
			if opts.stall != nil && opts.stall(d) {
				<-ctx.Done()
				errs[d] = ctx.Err()
				return
			}
			outs, carry, err := dr.run(ctx)
			if err != nil {
				errs[d] = err
				cancel()
				return
			}
			finals[d], res.Carry[d] = outs, carry
			st := &res.Devices[d]
			st.Device, st.Peak, st.Final, st.Events = d, dr.peak, dr.cur, dr.events
		}(d)
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err := firstError(errs); err != nil {
		return nil, err
	}
	for d := range res.Devices {
		res.Devices[d].BytesSent = tr.BytesSent(d)
	}
	for i, o := range p.Outputs {
		parts := make([]*Tensor, n)
		for d := range parts {
			parts[d] = finals[d][i]
		}
		t, err := Assemble(p.Mesh, o.Output.Value.Type, o.Placement, parts)
		if err != nil {
			return nil, fmt.Errorf("output %s: %v", o.Output.Name, err)
		}
		res.Names = append(res.Names, o.Output.Name)
		res.Outputs = append(res.Outputs, t)
	}
	return res, nil
}

// firstError prefers a real failure over the cancellations it caused.
func firstError(errs []error) error {
	var cancelled error
	for _, e := range errs {
		if e == nil {
			continue
		}
		if errors.Is(e, context.Canceled) {
			if cancelled == nil {
				cancelled = e
			}
			continue
		}
		return e
	}
	return cancelled
}

type deviceRun struct {
	plan   *lower.Plan
	prog   *lower.Program
	opts   *Options
	coll   Collectives
	cache  *npyCache
	start  time.Time
	slots  []*Tensor
	cur    int64
	peak   int64
	events []Event
}

func (dr *deviceRun) run(ctx context.Context) ([]*Tensor, []*Tensor, error) {
	dr.slots = make([]*Tensor, dr.prog.NumSlots)
	m := dr.plan.Mesh
	for i := range dr.prog.Instrs {
		in := &dr.prog.Instrs[i]
		t0 := time.Since(dr.start)
		t, kind, sent, err := dr.exec(ctx, in)
		if err == nil && !sameShape(t.Shape, in.Shape) {
			err = fmt.Errorf("result has local shape %v, the plan says %v", t.Shape, in.Shape)
		}
		if err != nil {
			return nil, nil, &RunError{Device: dr.prog.Device, Coord: m.CoordString(dr.prog.Device), Op: dr.describe(in), Pos: in.Pos, Err: err}
		}
		dr.events = append(dr.events, Event{Name: in.Name(), Kind: kind, Start: t0, Dur: time.Since(dr.start) - t0, Bytes: sent, Where: lang.FormatPos(in.Pos)})
		dr.slots[in.Out] = t
		dr.cur += t.Bytes()
		dr.peak = max(dr.peak, dr.cur)
		for _, s := range in.Free {
			dr.cur -= dr.slots[s].Bytes()
			dr.slots[s] = nil
		}
	}
	outs := make([]*Tensor, len(dr.prog.OutputSlots))
	for i, s := range dr.prog.OutputSlots {
		outs[i] = dr.slots[s]
	}
	carry := make([]*Tensor, len(dr.prog.CarrySlots))
	for i, s := range dr.prog.CarrySlots {
		carry[i] = dr.slots[s]
	}
	return outs, carry, nil
}

func (dr *deviceRun) describe(in *lower.Instr) string {
	if in.Kind == lower.Box {
		return fmt.Sprintf("%s over %s of %s", in.Step.Kind, dr.plan.Mesh.Axes[in.Step.Axis].Name, in.Value.Label())
	}
	if in.Kind == lower.Source {
		return fmt.Sprintf("initialising %s", in.Value.Label())
	}
	return fmt.Sprintf("%s (%s)", in.Value.Op, in.Value.Label())
}

func (dr *deviceRun) exec(ctx context.Context, in *lower.Instr) (t *Tensor, kind string, sent int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	switch in.Kind {
	case lower.Source:
		if dr.opts.Feed != nil {
			if t = dr.opts.Feed(dr.prog.Device, in.Value); t != nil {
				return t, "source", 0, nil
			}
		}
		if in.Value.Op == "hyper" {
			return nil, "source", 0, fmt.Errorf("no value fed for %s", in.Value.Label())
		}
		t, err = materialise(in.Value, dr.plan.Mesh, dr.plan.Placement[in.Value], dr.prog.Device, dr.opts.Seed, dr.cache)
		return t, "source", 0, err
	case lower.Compute:
		args := make([]*Tensor, len(in.Args))
		for i, s := range in.Args {
			args[i] = dr.slots[s]
		}
		t, err = dr.opts.Backend.Compute(&OpCall{Value: in.Value, Args: args, In: in.In, Out: in.Block})
		return t, "compute", 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, dr.opts.Timeout)
	defer cancel()
	before := bytesSent(dr.coll, dr.prog.Device)
	t, err = boxStep(cctx, dr.coll, dr.plan.Mesh, in, dr.slots[in.Args[0]])
	sent = bytesSent(dr.coll, dr.prog.Device) - before
	kind = "local"
	if in.Step.Kind.Communicates() {
		kind = "comm"
	}
	if errors.Is(err, ErrPeerTimeout) {
		err = fmt.Errorf("%w after %v", err, dr.opts.Timeout)
	}
	return t, kind, sent, err
}

// boxStep runs one boxing step on this device's block x.
func boxStep(ctx context.Context, c Collectives, m *mesh.Mesh, in *lower.Instr, x *Tensor) (*Tensor, error) {
	st := in.Step
	g := Group{Devices: in.Group, Rank: in.Rank}
	shape := in.Value.Type.Shape
	from, to := st.From[st.Axis], st.To[st.Axis]
	op := OpSum
	if st.Reduce == sbp.Max {
		op = OpMax
	}
	var t *Tensor
	var err error
	switch st.Kind {
	case sbp.AllGather:
		t, err = c.AllGather(ctx, g, x, from.Dim, in.Lens)
	case sbp.ReduceScatter:
		t, err = c.ReduceScatter(ctx, g, x, to.Dim, in.Lens, op)
	case sbp.AllReduce:
		t, err = c.AllReduce(ctx, g, x, op)
	case sbp.AllToAll:
		t, err = c.AllToAll(ctx, g, x, to.Dim, in.Lens, from.Dim)
	case sbp.LocalSlice:
		off := make([]int, len(shape))
		for i := range off {
			off[i] = in.Block.Off[i] - in.In[0].Off[i]
		}
		t = Extract(x, off, in.Block.Len)
	case sbp.LocalPartial:
		t = makePartial(x, in, op)
	default:
		err = fmt.Errorf("unknown boxing step %s", st.Kind)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// makePartial turns a replicated or split block into a partial one: for a
// sum, one device of the group keeps the values (B) or each device places its
// block in zeros (S); for max, every device keeps its values and fills the
// rest with -inf.
func makePartial(x *Tensor, in *lower.Instr, op ReduceOp) *Tensor {
	from := in.Step.From[in.Step.Axis]
	if from.IsB() {
		if op == OpMax || in.Rank == 0 {
			return x.Clone()
		}
		return NewTensor(x.DType, x.Shape)
	}
	out := NewTensor(x.DType, in.Block.Len)
	if op == OpMax {
		fillNegInf(out)
	}
	off := make([]int, len(x.Shape))
	for i := range off {
		off[i] = in.In[0].Off[i] - in.Block.Off[i]
	}
	CopyBlock(out, off, x, make([]int, len(x.Shape)), x.Shape)
	return out
}

var negInf = math.Inf(-1)

// bytesSent asks a Collectives (or its transport) how much a device has sent.
func bytesSent(c Collectives, dev int) int64 {
	if r, ok := c.(Ring); ok {
		c2, ok := r.T.(interface{ BytesSent(int) int64 })
		if ok {
			return c2.BytesSent(dev)
		}
	}
	return 0
}

func fillNegInf(t *Tensor) {
	switch d := t.Data.(type) {
	case []uint16:
		neg := uint16(0xff80) // bf16 -inf
		if t.DType == lang.F16 {
			neg = 0xfc00
		}
		for i := range d {
			d[i] = neg
		}
	case []float32:
		for i := range d {
			d[i] = float32(negInf)
		}
	case []float64:
		for i := range d {
			d[i] = negInf
		}
	}
}
