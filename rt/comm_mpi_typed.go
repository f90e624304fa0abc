package rt

import (
	"context"
	"fmt"

	"github.com/meshrun/meshrun/rt/mpi"
)

// The typed calls of package mpi, chosen by a tensor's storage type.

func mpiOp(op ReduceOp) mpi.Op {
	if op == OpMax {
		return mpi.Max
	}
	return mpi.Sum
}

func recvAny(ctx context.Context, c *mpi.Comm, d any, peer, tag int) (int, error) {
	var st mpi.Status
	var err error
	switch d := d.(type) {
	case []float32:
		st, err = mpi.Recv(ctx, c, d, peer, tag)
	case []float64:
		st, err = mpi.Recv(ctx, c, d, peer, tag)
	case []int32:
		st, err = mpi.Recv(ctx, c, d, peer, tag)
	case []int64:
		st, err = mpi.Recv(ctx, c, d, peer, tag)
	case []uint16:
		st, err = mpi.Recv(ctx, c, d, peer, tag)
	default:
		return 0, fmt.Errorf("mpi: cannot receive %T", d)
	}
	return st.Count, err
}

// reduceAny is MPI_Allreduce (counts nil) or MPI_Reduce_scatter.
func reduceAny(ctx context.Context, c *mpi.Comm, send, recv any, counts []int, op ReduceOp) error {
	o := mpiOp(op)
	switch s := send.(type) {
	case []float32:
		return reduceT(ctx, c, s, recv.([]float32), counts, o)
	case []float64:
		return reduceT(ctx, c, s, recv.([]float64), counts, o)
	case []int32:
		return reduceT(ctx, c, s, recv.([]int32), counts, o)
	case []int64:
		return reduceT(ctx, c, s, recv.([]int64), counts, o)
	}
	return fmt.Errorf("mpi: cannot reduce %T", send)
}

func reduceT[T mpi.Number](ctx context.Context, c *mpi.Comm, send, recv []T, counts []int, op mpi.Op) error {
	if counts == nil {
		return mpi.Allreduce(ctx, c, send, recv, op)
	}
	return mpi.ReduceScatter(ctx, c, send, recv, counts, op)
}

// reduceRootAny is MPI_Reduce of send into recv on root (recv is nil
// elsewhere).
func reduceRootAny(ctx context.Context, c *mpi.Comm, send, recv any, root int) error {
	switch s := send.(type) {
	case []float32:
		r, _ := recv.([]float32)
		return mpi.Reduce(ctx, c, s, r, mpi.Sum, root)
	case []float64:
		r, _ := recv.([]float64)
		return mpi.Reduce(ctx, c, s, r, mpi.Sum, root)
	case []int32:
		r, _ := recv.([]int32)
		return mpi.Reduce(ctx, c, s, r, mpi.Sum, root)
	case []int64:
		r, _ := recv.([]int64)
		return mpi.Reduce(ctx, c, s, r, mpi.Sum, root)
	}
	return fmt.Errorf("mpi: cannot reduce %T", send)
}

func gatherAny(ctx context.Context, c *mpi.Comm, send, recv any, counts []int) error {
	switch s := send.(type) {
	case []float32:
		return mpi.Allgatherv(ctx, c, s, recv.([]float32), counts)
	case []float64:
		return mpi.Allgatherv(ctx, c, s, recv.([]float64), counts)
	case []int32:
		return mpi.Allgatherv(ctx, c, s, recv.([]int32), counts)
	case []int64:
		return mpi.Allgatherv(ctx, c, s, recv.([]int64), counts)
	case []uint16:
		return mpi.Allgatherv(ctx, c, s, recv.([]uint16), counts)
	}
	return fmt.Errorf("mpi: cannot gather %T", send)
}

func alltoallAny(ctx context.Context, c *mpi.Comm, send any, sc []int, recv any, rc []int) error {
	switch s := send.(type) {
	case []float32:
		return mpi.Alltoallv(ctx, c, s, sc, recv.([]float32), rc)
	case []float64:
		return mpi.Alltoallv(ctx, c, s, sc, recv.([]float64), rc)
	case []int32:
		return mpi.Alltoallv(ctx, c, s, sc, recv.([]int32), rc)
	case []int64:
		return mpi.Alltoallv(ctx, c, s, sc, recv.([]int64), rc)
	case []uint16:
		return mpi.Alltoallv(ctx, c, s, sc, recv.([]uint16), rc)
	}
	return fmt.Errorf("mpi: cannot exchange %T", send)
}

func bcastAny(ctx context.Context, c *mpi.Comm, d any, root int) error {
	switch d := d.(type) {
	case []float32:
		return mpi.Bcast(ctx, c, d, root)
	case []float64:
		return mpi.Bcast(ctx, c, d, root)
	case []int32:
		return mpi.Bcast(ctx, c, d, root)
	case []int64:
		return mpi.Bcast(ctx, c, d, root)
	case []uint16:
		return mpi.Bcast(ctx, c, d, root)
	}
	return fmt.Errorf("mpi: cannot broadcast %T", d)
}
