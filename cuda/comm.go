package cuda

// The backend's side of the collectives among logical ranks sharing this
// GPU: rt.DeviceCollectives, whose protocol (posting, two barriers, the
// split of the work, the ring's order) lives in rt/comm_dev.go. Each
// method is one launch of a kernel of comm.cu on the device's stream,
// with every member's pointer passed by value; nothing is copied to the
// host and nothing waits.

import (
	_ "embed" // the kernel source
	"encoding/binary"
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// CommSource is the CUDA C of the collective kernels (comm.cu), compiled
// after memory.cu.
//
//go:embed comm.cu
var CommSource string

// MaxMembers is comm.cu's MR_MAX_MEMBERS: the largest group whose
// pointers a launch takes by value.
const MaxMembers = 32

// MaxMembers implements rt.DeviceCollectives.
func (be *Backend) MaxMembers() int { return MaxMembers }

// Uninit implements rt.DeviceCollectives.
func (be *Backend) Uninit(dt ir.DType, shape []int) (rt.Buffer, error) {
	return buffer(be.newBuf(dt, shape))
}

// ReduceRows implements rt.DeviceCollectives.
func (be *Backend) ReduceRows(outs, in []rt.Buffer, first int, span rt.Rows, op rt.ReduceOp) error {
	os, err := be.members(outs)
	if err != nil {
		return err
	}
	is, err := be.members(in)
	if err != nil {
		return err
	}
	dt := in[0].Elem()
	s, err := elemSuffix(dt)
	if err != nil {
		return err
	}
	if op != rt.OpSum && op != rt.OpMax {
		return fmt.Errorf("cuda: no collective kernel for reduction %d", op)
	}
	if err := be.checkRows(outs, in, span); err != nil {
		return err
	}
	return be.shared(func() error {
		return be.dev.launch("mr_reduce_rows_"+s, int64(span.Count*span.Len),
			new(params).members(os).members(is).i64(int64(first)).i64(int64(op)).rows(span))
	})
}

// CopyRows implements rt.DeviceCollectives.
func (be *Backend) CopyRows(outs []rt.Buffer, x rt.Buffer, span rt.Rows) error {
	os, err := be.members(outs)
	if err != nil {
		return err
	}
	xs, err := be.members([]rt.Buffer{x})
	if err != nil {
		return err
	}
	s, err := moveSuffix(x.Elem())
	if err != nil {
		return err
	}
	if err := be.checkRows(outs, []rt.Buffer{x}, span); err != nil {
		return err
	}
	return be.shared(func() error {
		return be.dev.launch("mr_copy_rows_"+s, int64(span.Count*span.Len), new(params).members(os).ptr(xs[0]).rows(span))
	})
}

// CopyBlock implements rt.DeviceCollectives.
func (be *Backend) CopyBlock(out rt.Buffer, outOff []int, x rt.Buffer, xOff, count []int) error {
	bs, err := be.members([]rt.Buffer{out, x})
	if err != nil {
		return err
	}
	o, s := out.Dims(), x.Dims()
	if len(outOff) != len(o) || len(xOff) != len(s) || len(count) != len(o) || len(o) != len(s) || out.Elem() != x.Elem() {
		return fmt.Errorf("cuda: a block of %s%v into %s%v", x.Elem(), s, out.Elem(), o)
	}
	for d := range count {
		if xOff[d] < 0 || outOff[d] < 0 || xOff[d]+count[d] > s[d] || outOff[d]+count[d] > o[d] {
			return fmt.Errorf("cuda: block %v at %v of %v does not fit %v at %v", count, xOff, s, o, outOff)
		}
	}
	es := int64(x.Elem().Size())
	return be.shared(func() error {
		return be.copyBox(x.Elem(), bs[0]+uint64(int64(offset(o, outOff))*es), denseStrides(o),
			bs[1]+uint64(int64(offset(s, xOff))*es), denseStrides(s), count)
	})
}

// TreeReduce implements rt.DeviceCollectives.
func (be *Backend) TreeReduce(out rt.Buffer, in []rt.Buffer, root int) error {
	os, err := be.members([]rt.Buffer{out})
	if err != nil {
		return err
	}
	is, err := be.members(in)
	if err != nil {
		return err
	}
	s, err := elemSuffix(out.Elem())
	if err != nil {
		return err
	}
	n := numel(out.Dims())
	for m, b := range in {
		if b.Elem() != out.Elem() || numel(b.Dims()) != n {
			return fmt.Errorf("cuda: reduce: member %d holds %s%v, the result is %s%v", m, b.Elem(), b.Dims(), out.Elem(), out.Dims())
		}
	}
	if root < 0 || root >= len(in) {
		return fmt.Errorf("cuda: reduce: root %d of %d members", root, len(in))
	}
	return be.shared(func() error {
		return be.dev.launch("mr_tree_reduce_"+s, int64(n), new(params).ptr(os[0]).members(is).i64(int64(root)).i64(int64(n)))
	})
}

// shared issues a member's part of a collective under the device's
// bracket lock (events.go), so that it lands between the other ranks'
// exclusive spans on the timeline, not inside one. A member holds the
// lock only while it launches, never at a barrier: no deadlock.
func (be *Backend) shared(launch func() error) error {
	be.dev.events.bracket.Lock()
	defer be.dev.events.bracket.Unlock()
	return launch()
}

// members are the device pointers of bufs: this backend's live buffers,
// at most MaxMembers of them.
func (be *Backend) members(bufs []rt.Buffer) ([]uint64, error) {
	if len(bufs) == 0 || len(bufs) > MaxMembers {
		return nil, fmt.Errorf("cuda: a collective of %d members (1 to %d on one GPU)", len(bufs), MaxMembers)
	}
	ps := make([]uint64, len(bufs))
	for i, b := range bufs {
		d, ok := b.(*Buf)
		if !ok || d.dev != be.dev {
			return nil, fmt.Errorf("cuda: a collective's buffer %d is a %T, not this GPU's", i, b)
		}
		if d.ptr == 0 && d.bytes > 0 {
			return nil, fmt.Errorf("cuda: a collective's buffer %d was freed", i)
		}
		ps[i] = d.ptr
	}
	return ps, nil
}

// checkRows checks that span stays inside every buffer, of one dtype.
func (be *Backend) checkRows(outs, in []rt.Buffer, span rt.Rows) error {
	if span.Count <= 0 || span.Len <= 0 {
		return fmt.Errorf("cuda: empty rows %+v", span)
	}
	last := func(at, stride int) int { return at + (span.Count-1)*stride + span.Len }
	dt := in[0].Elem()
	for _, set := range []struct {
		bufs []rt.Buffer
		end  int
	}{{in, last(span.Src, span.SrcStride)}, {outs, last(span.Dst, span.DstStride)}} {
		for i, b := range set.bufs {
			if b.Elem() != dt || span.Src < 0 || span.Dst < 0 || set.end > numel(b.Dims()) {
				return fmt.Errorf("cuda: rows %+v of %s outside buffer %d, %s%v", span, dt, i, b.Elem(), b.Dims())
			}
		}
	}
	return nil
}

// elemSuffix names a reduction kernel for a dtype.
func elemSuffix(dt ir.DType) (string, error) {
	switch dt {
	case ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16:
		return dt.String(), nil
	}
	return "", fmt.Errorf("cuda: no collective kernel for %s", dt)
}

// members appends an mr_members by value: the count, then MaxMembers
// pointers (unused ones zero).
func (p *params) members(ptrs []uint64) *params {
	p.offs = append(p.offs, len(p.buf))
	p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(len(ptrs)))
	for i := range MaxMembers {
		var v uint64
		if i < len(ptrs) {
			v = ptrs[i]
		}
		p.buf = binary.LittleEndian.AppendUint64(p.buf, v)
	}
	return p
}

// rows appends an mr_rows by value.
func (p *params) rows(r rt.Rows) *params {
	p.offs = append(p.offs, len(p.buf))
	for _, v := range []int{r.Count, r.Len, r.Src, r.SrcStride, r.Dst, r.DstStride} {
		p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(int64(v)))
	}
	return p
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

var _ rt.DeviceCollectives = (*Backend)(nil)
