package plan

import (
	"fmt"

	"github.com/meshrun/meshrun/sbp"
)

// Buckets: collectives launched together.
//
// Consecutive collectives of one kind — all-reduces, reduce-scatters or
// all-gathers — over one group, of one dtype and reduction, none reading
// another's result, may run as one launch: the first of them starts a
// bucket and each further one has Joins set. A rank runs the bucket's
// collectives at once (one meeting of the group where the transport
// allows it) and then holds each member's result and frees its slots at
// the member's own instruction; every member keeps its own arguments,
// result, bytes and source position. The memory replay needs nothing of
// its own: lower frees every member's argument at the bucket's last
// member, which is when a launch of them all ends.

// BucketAt returns the number of instructions in the bucket that starts
// at instruction i: 1 for an instruction no other joins.
func (prog *Program) BucketAt(i int) int {
	k := 1
	for i+k < len(prog.Instrs) && prog.Instrs[i+k].Joins {
		k++
	}
	return k
}

// Bucketable says whether a collective of kind k may be in a bucket.
func Bucketable(k sbp.Collective) bool {
	return k == sbp.AllReduce || k == sbp.ReduceScatter || k == sbp.AllGather
}

// checkJoin checks instruction i's Joins: it is a collective of the kind
// of the one before it, reading no result of an earlier member of its
// bucket.
func checkJoin(prog *Program, i int) error {
	in := &prog.Instrs[i]
	if !in.Joins {
		return nil
	}
	if i == 0 {
		return fmt.Errorf("joins a bucket, but no instruction comes before it")
	}
	prev := &prog.Instrs[i-1]
	switch {
	case in.Kind != Collective || !Bucketable(in.Step.Kind):
		return fmt.Errorf("joins a bucket, but is a %s, not an all-reduce, reduce-scatter or all-gather", in.Name())
	case prev.Kind != Collective || prev.Step.Kind != in.Step.Kind:
		return fmt.Errorf("joins a bucket after %s, which is not an %s", prev.Name(), in.Step.Kind)
	case in.Group != prev.Group || in.Step.Axis != prev.Step.Axis:
		return fmt.Errorf("joins a bucket over group g%d after an %s over g%d", in.Group, prev.Step.Kind, prev.Group)
	case in.DType != prev.DType || in.Step.Reduce != prev.Step.Reduce:
		return fmt.Errorf("joins a bucket of %s %s reductions as %s %s", prev.DType, prev.Step.Reduce, in.DType, in.Step.Reduce)
	case in.Host || prev.Host:
		return fmt.Errorf("joins a bucket in host memory")
	}
	for j := i - 1; j >= 0; j-- {
		m := &prog.Instrs[j]
		if m.Out == in.Args[0] {
			return fmt.Errorf("joins a bucket but reads s%d, the result of %s in the same bucket", m.Out, m.Name())
		}
		if !m.Joins {
			break
		}
	}
	return nil
}
