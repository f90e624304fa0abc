package pipeline

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Hand-made broken schedules: Validate must name the problem and mark the
// offending cell of the step × rank grid, at the step and rank given here.
func TestValidateRejects(t *testing.T) {
	cases := []struct {
		what       string
		text       string
		rank, step int
		cell       string // the marked cell as drawn
		problem    string // part of the message
	}{
		{"backward before forward", `
schedule x ranks=2 stages=2 micro=2 stage-rank=0,1
rank 0: 0F0 0F1 0B0 0B1
rank 1: 1F0 1B1 1B0 1F1`, 1, 1, "[1B1]", "1B1 before its forward 1F1"},
		{"missing forward, its backward present", `
schedule x ranks=2 stages=2 micro=2 stage-rank=0,1
rank 0: 0F0 0B0 0B1
rank 1: 1F0 1F1 1B0 1B1`, 0, 2, "[0B1]", "0B1 before its forward 0F1"},
		{"missing forward and backward", `
schedule x ranks=2 stages=2 micro=2 stage-rank=0,1
rank 0: 0F0 0B0
rank 1: 1F0 1F1 1B0 1B1`, 0, 2, "[?]", "stage 0 has no forward 0F1"},
		{"missing backward", `
schedule x ranks=2 stages=2 micro=2 stage-rank=0,1
rank 0: 0F0 0F1 0B0 0B1
rank 1: 1F0 1F1 1B0`, 1, 3, "[?]", "stage 1 has no backward"},
		{"W before I", `
schedule x ranks=2 stages=2 micro=1 stage-rank=0,1
rank 0: 0F0 0I0 0W0
rank 1: 1F0 1W0 1I0`, 1, 1, "[1W0]", "1W0 before its input backward 1I0"},
		{"I without W", `
schedule x ranks=1 stages=1 micro=2 stage-rank=0
rank 0: 0F0 0F1 0I0 0W0 0I1`, 0, 5, "[?]", "0I1 but no 0W1"},
		{"W after full B", `
schedule x ranks=1 stages=1 micro=1 stage-rank=0
rank 0: 0F0 0B0 0W0`, 0, 2, "[0W0]", "after a full backward"},
		{"stage on two ranks", `
schedule x ranks=2 stages=2 micro=2 stage-rank=0,1
rank 0: 0F0 0F1 0B0 0B1
rank 1: 1F0 1F1 0F1 1B0 1B1`, 1, 2, "[0F1]", "a stage must live on one rank"},
		{"second forward", `
schedule x ranks=1 stages=1 micro=1 stage-rank=0
rank 0: 0F0 0F0 0B0`, 0, 1, "[0F0]", "second forward 0F0"},
		{"receive from before the first stage", `
schedule x ranks=2 stages=2 micro=1 stage-rank=0,1
rank 0: 0RECV_F0 0F0 0B0
rank 1: 1F0 1B0`, 0, 0, "[0RECV_F0]", "talks to a stage that does not exist"},
		{"send between stages of one rank", `
schedule x ranks=1 stages=2 micro=1 stage-rank=0,0
rank 0: 0F0 0SEND_F0 1F0 1B0 0B0`, 0, 1, "[0SEND_F0]", "same rank 0"},
		{"send from another rank's stage", `
schedule x ranks=2 stages=2 micro=1 stage-rank=0,1
rank 0: 0F0 0B0
rank 1: 0SEND_F0 1F0 1B0`, 1, 0, "[0SEND_F0]", "stage 0 is on rank 0"},
		{"micro-batch out of range", `
schedule x ranks=1 stages=1 micro=1 stage-rank=0
rank 0: 0F0 0B0 0F1`, 0, 2, "[0F1]", "micro-batch 1 outside 0..0"},
	}
	for _, c := range cases {
		s, err := ParseSchedule(c.text)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		err = s.Validate()
		var se *ScheduleError
		if !errors.As(err, &se) {
			t.Errorf("%s: Validate() = %v, want a *ScheduleError", c.what, err)
			continue
		}
		if se.Rank != c.rank || se.Step != c.step {
			t.Errorf("%s: marked rank %d step %d, want rank %d step %d", c.what, se.Rank, se.Step, c.rank, c.step)
		}
		if !strings.Contains(err.Error(), c.problem) {
			t.Errorf("%s: message %q lacks %q", c.what, err, c.problem)
		}
		if !strings.Contains(err.Error(), se.Grid) {
			t.Errorf("%s: the message does not include the grid", c.what)
		}
		assertMarked(t, c.what, se.Grid, c.rank, c.step, c.cell)
	}
}

// assertMarked finds the one bracketed cell of a grid and checks that it is
// in the row of the given step and the column of the given rank.
func assertMarked(t *testing.T, what, grid string, rank, step int, cell string) {
	t.Helper()
	if n := strings.Count(grid, "["); n != 1 {
		t.Errorf("%s: %d marked cells, want 1:\n%s", what, n, grid)
		return
	}
	for _, line := range strings.Split(grid, "\n") {
		fields := strings.Fields(line) // "step", N, one cell per rank
		if len(fields) < 2 || fields[0] != "step" || fields[1] != strconv.Itoa(step) {
			continue
		}
		if len(fields) <= 2+rank || fields[2+rank] != cell {
			t.Errorf("%s: row of step %d is %q, want %s in rank %d's column:\n%s", what, step, line, cell, rank, grid)
		}
		return
	}
	t.Errorf("%s: no row for step %d:\n%s", what, step, grid)
}

// The grid of a long schedule shows a window around the marked cell.
func TestGridWindow(t *testing.T) {
	s, err := Generate("1f1b", 2, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Break the last backward of stage 1: drop it, so the error marks the
	// end of rank 1's list.
	s.Actions[1] = s.Actions[1][:len(s.Actions[1])-1]
	err = s.Validate()
	var se *ScheduleError
	if !errors.As(err, &se) {
		t.Fatalf("Validate() = %v", err)
	}
	if se.Rank != 1 || se.Step != 79 {
		t.Fatalf("marked rank %d step %d, want rank 1 step 79", se.Rank, se.Step)
	}
	rows := 0
	for _, line := range strings.Split(se.Grid, "\n") {
		if strings.HasPrefix(line, "step ") {
			rows++
		}
	}
	if rows != gridWindow+1 || !strings.Contains(se.Grid, "...") {
		t.Errorf("grid shows %d rows, want the %d up to the mark after an ellipsis:\n%s", rows, gridWindow+1, se.Grid)
	}
	assertMarked(t, "window", se.Grid, 1, 79, "[?]")
}
