package rt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt/mpi"
	"github.com/meshrun/meshrun/sbp"
)

// Point-to-point through the worker on the MPI launcher, one process per
// rank (this test binary, started under mpirun.openmpi): the plan's sends
// are buffered, so
//   - a rank that sends two messages and a peer that receives them in the
//     other tag order must not deadlock, even above MPI's eager limit;
//   - a sent buffer must not be recycled for a later result while MPI may
//     still read it (the MPI launcher's backend recycles freed buffers).
// Each rank sends a tensor of its own values to the other, twice (tags 1
// then 2), runs an all-reduce of a same-size tensor in between (whose
// result would land in a recycled sent buffer), then receives tag 2 before
// tag 1.

const p2pElems = 1 << 16 // 256 KiB of f32: well above the eager limit

func p2pPlan() *plan.Plan {
	m := mesh.New("M", mesh.Axis{Name: "pp", Size: 2})
	s, pl := []int{2 * p2pElems}, sbp.NdSBP{sbp.S(0)}
	pp, bb := sbp.NdSBP{sbp.P}, sbp.NdSBP{sbp.B}
	at := ir.Pos{Filename: "p2p.mesh", Line: 1, Column: 1}
	peer := plan.Peer{Axes: []int{0}, Shift: []int{1}}
	in := func(i plan.Instr) plan.Instr {
		i.Label, i.DType, i.Pos = "x", ir.F32, at
		if i.Shape == nil {
			i.Shape, i.Placement = s, pl
		}
		return i
	}
	prog := &plan.Program{SlotType: slices.Repeat([]ir.DType{ir.F32}, 7), OutputSlots: []int{4, 5, 6}, Instrs: []plan.Instr{
		in(plan.Instr{Kind: plan.Source, Src: 0, Out: 0}),
		in(plan.Instr{Kind: plan.Send, Args: []int{0}, Out: -1, Peer: peer, Tag: 1}),
		in(plan.Instr{Kind: plan.Send, Args: []int{0}, Out: -1, Peer: peer, Tag: 2, Free: []int{0}}),
		in(plan.Instr{Kind: plan.Source, Src: 1, Out: 1, Shape: []int{p2pElems}, Placement: pp}),
		in(plan.Instr{Kind: plan.Collective, Group: 0, Step: &sbp.Step{Axis: 0, From: pp, To: bb, Kind: sbp.AllReduce},
			Args: []int{1}, Out: 6, Free: []int{1}, Shape: []int{p2pElems}, Placement: bb, ArgPlace: []sbp.NdSBP{pp}}),
		in(plan.Instr{Kind: plan.Recv, Out: 5, Peer: peer, Tag: 2}),
		in(plan.Instr{Kind: plan.Recv, Out: 4, Peer: peer, Tag: 1}),
	}}
	return &plan.Plan{Mesh: m, Groups: []plan.Group{{Axes: []int{0}}}, Programs: []*plan.Program{prog},
		Sources: []plan.Tensor{
			{Name: "x", Role: "hyper", DType: ir.F32, Shape: s, Placement: pl},
			{Name: "y", Role: "hyper", DType: ir.F32, Shape: []int{p2pElems}, Placement: pp}},
		Outputs: []plan.Tensor{
			{Name: "a", DType: ir.F32, Shape: s, Placement: pl},
			{Name: "b", DType: ir.F32, Shape: s, Placement: pl},
			{Name: "c", DType: ir.F32, Shape: []int{p2pElems}, Placement: bb}}}
}

func p2pFeed(r int) Feed {
	return func(src int) (Buffer, error) {
		v := float32(100 + r)
		if src == 1 {
			v = 1 // the all-reduce's result is 2 everywhere
		}
		t := NewTensor(ir.F32, []int{p2pElems})
		for i := range t.Data.([]float32) {
			t.Data.([]float32)[i] = v
		}
		return t, nil
	}
}

// checkP2P is what every rank of the run checks: each block of a and b
// came from the other rank, untouched.
func checkP2P(res *Result) error {
	for _, name := range []string{"a", "b"} {
		d := res.Output(name).Data.([]float32)
		for r := 0; r < 2; r++ {
			want := float32(100 + (1 - r)) // block r was received from the other rank
			if got := d[r*p2pElems+p2pElems/2]; got != want {
				return fmt.Errorf("%s block %d: %v, want %v", name, r, got, want)
			}
		}
	}
	if c := res.Output("c").Data.([]float32); c[0] != 2 {
		return fmt.Errorf("c = %v, want 2", c[0])
	}
	return nil
}

func TestSendRecvLikeTheLocalLauncher(t *testing.T) {
	p := p2pPlan()
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	l, err := NewLocal(context.Background(), p, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(context.Background(), p2pFeed)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkP2P(res); err != nil {
		t.Fatal(err)
	}
}

func TestSendRecvUnderMPI(t *testing.T) {
	if os.Getenv("MESHRUN_RT_P2P_RANK") != "" {
		mpiP2PRank(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes under mpirun")
	}
	if _, err := exec.LookPath("mpirun.openmpi"); err != nil {
		t.Skip("mpirun.openmpi not found: apt-get install openmpi-bin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun.openmpi", "-np", "2", "--oversubscribe", os.Args[0], "-test.run=^TestSendRecvUnderMPI$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "MESHRUN_RT_P2P_RANK=1", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl=self,vader", "OMPI_MCA_oob_tcp_if_include=lo")
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "p2p rank ok") != 2 {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
}

// mpiP2PRank is one rank of TestSendRecvUnderMPI.
func mpiP2PRank(t *testing.T) {
	ctx := context.Background()
	m, err := NewMPI(ctx, p2pPlan(), Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunOn(ctx, m, p2pFeed, true)
	if err == nil {
		err = checkP2P(res)
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("p2p rank ok")
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := mpi.Finalize(fctx); err != nil {
		t.Fatal(err)
	}
}
