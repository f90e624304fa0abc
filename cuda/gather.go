package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// The ops that index with an integer tensor (gather.cu): embedding,
// embedding_grad, cross_entropy, cross_entropy_grad. Their arguments mix
// a float dtype T (f32, f64) and an index dtype (i32, i64).

// gatherArgs are, per op, which arguments are the index tensor; the
// others are of the kernel's dtype.
var gatherArgs = map[string]struct {
	n   int // arguments
	idx int // which one holds the indices
}{
	"embedding":          {2, 1},
	"embedding_grad":     {2, 0},
	"cross_entropy":      {2, 1},
	"cross_entropy_grad": {3, 1},
}

func nativeGather(k *plan.Kernel) bool {
	g, ok := gatherArgs[k.Op]
	if !ok || len(k.ArgDTypes) != g.n || (k.DType != ir.F32 && k.DType != ir.F64) {
		return false
	}
	for i, dt := range k.ArgDTypes {
		if i == g.idx && dt != ir.I32 && dt != ir.I64 || i != g.idx && dt != k.DType {
			return false
		}
	}
	return true
}

func gatherName(op string, dt, idx ir.DType) string {
	s, _ := KernelName(op, dt)
	return s + "_" + idx.String()
}

// badIndex launches a kernel that may report an index out of range in a
// two-word flag (set: the index), reads the flag back, and turns it into
// the CPU backend's error.
func (be *Backend) badIndex(launch func(flag uint64) error, what string, limit int) error {
	flag, err := be.dev.alloc(16)
	if err != nil {
		return err
	}
	defer be.dev.release(flag, 16)
	if err := be.dev.zero(flag, 16); err != nil {
		return err
	}
	if err := launch(flag); err != nil {
		return err
	}
	var words [16]byte
	if err := be.dev.toHost(unsafe.Pointer(&words[0]), flag, 16); err != nil {
		return err
	}
	if binary.LittleEndian.Uint64(words[:]) != 0 {
		return fmt.Errorf("%s %d out of range [0, %d)", what, int64(binary.LittleEndian.Uint64(words[8:])), limit)
	}
	return nil
}

// embedding looks up rows of this device's block of the table (rows from
// in[0].Off[0] of a vocabulary of ArgShapes[0][0]).
func (be *Backend) embedding(k *plan.Kernel, w, idx *Buf, in []sbp.Block) (rt.Buffer, error) {
	if len(w.shape) != 2 || len(in) < 1 || len(in[0].Off) < 1 {
		return nil, fmt.Errorf("cuda: embedding of a %s table", ir.ShapeString(w.shape))
	}
	rows, h, n := w.shape[0], w.shape[1], count(idx.shape)
	vocab, off := k.ArgShapes[0][0], in[0].Off[0]
	out, err := be.newBuf(k.DType, append(append([]int{}, idx.shape...), h))
	if err != nil {
		return nil, err
	}
	err = be.badIndex(func(flag uint64) error {
		p := new(params).ptr(out.ptr).ptr(w.ptr).ptr(idx.ptr).i64(int64(n)).i64(int64(h)).i64(int64(rows)).
			i64(int64(off)).i64(int64(vocab)).ptr(flag)
		return be.dev.launch(gatherName("embedding", k.DType, idx.dt), int64(n*h), p)
	}, "embedding index", vocab)
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// embeddingGrad is the table block's gradient (out's block: rows from
// out.Off[0]), g's rows added into the rows idx names, in double.
func (be *Backend) embeddingGrad(k *plan.Kernel, idx, g *Buf, out sbp.Block) (rt.Buffer, error) {
	if len(out.Len) != 2 || len(out.Off) != 2 {
		return nil, fmt.Errorf("cuda: embedding_grad into a %s block", ir.ShapeString(out.Len))
	}
	rows, h, n := out.Len[0], out.Len[1], count(idx.shape)
	if count(g.shape) != n*h {
		return nil, fmt.Errorf("cuda: embedding_grad of %s indices and a %s gradient", ir.ShapeString(idx.shape), ir.ShapeString(g.shape))
	}
	res, err := be.newBuf(k.DType, out.Len)
	if err != nil {
		return nil, err
	}
	accBytes := int64(rows*h) * 8
	acc, err := be.dev.alloc(accBytes)
	if err == nil {
		defer be.dev.release(acc, accBytes)
		err = be.dev.zero(acc, accBytes)
	}
	if err == nil {
		p := new(params).ptr(res.ptr).ptr(acc).ptr(idx.ptr).ptr(g.ptr).i64(int64(n)).i64(int64(rows)).i64(int64(h)).
			i64(int64(out.Off[0]))
		err = be.dev.launch(gatherName("embedding_grad", k.DType, idx.dt), int64(rows), p)
	}
	if err != nil {
		be.Free(res)
		return nil, err
	}
	return res, nil
}

// crossEntropy is the mean over the global batch (ArgShapes[0][0] rows)
// of logsumexp(row) − row[label], over this device's rows; with g, its
// gradient.
func (be *Backend) crossEntropy(k *plan.Kernel, x, lab, g *Buf) (rt.Buffer, error) {
	if len(x.shape) != 2 || count(lab.shape) != x.shape[0] {
		return nil, fmt.Errorf("cuda: %s of %s logits and %s labels", k.Op, ir.ShapeString(x.shape), ir.ShapeString(lab.shape))
	}
	n, c := x.shape[0], x.shape[1]
	div := float64(k.ArgShapes[0][0])
	var shape []int
	if g != nil {
		shape = x.shape
	}
	out, err := be.newBuf(k.DType, shape)
	if err != nil {
		return nil, err
	}
	ninf := math.Float64bits(math.Inf(-1))
	err = be.badIndex(func(flag uint64) error {
		p := new(params).ptr(out.ptr).ptr(x.ptr).ptr(lab.ptr)
		threads := int64(1)
		if g != nil {
			p.ptr(g.ptr)
			threads = int64(n)
		}
		p.i64(int64(n)).i64(int64(c)).u64(math.Float64bits(div)).u64(ninf).ptr(flag)
		return be.dev.launch(gatherName(k.Op, k.DType, lab.dt), threads, p)
	}, "cross_entropy label", c)
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}
