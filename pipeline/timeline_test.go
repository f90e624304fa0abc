package pipeline

import (
	"encoding/json"
	"math"
	"testing"
)

// Bubble by hand: rank 0 computes over [0,2] and [1,3] (overlapping, so
// 3 busy), rank 1 over [1,2]; the receive and the trailing send are not
// compute. Makespan 3, total 6, busy 4: bubble 2/6.
func TestBubbleByHand(t *testing.T) {
	evs := []Event{
		{Rank: 0, Kind: F, Start: 0, End: 2},
		{Rank: 0, Kind: B, Start: 1, End: 3},
		{Rank: 1, Stage: 1, Kind: RecvF, Start: 0, End: 1},
		{Rank: 1, Stage: 1, Kind: F, Start: 1, End: 2},
		{Rank: 1, Stage: 1, Kind: SendB, Start: 3, End: 5},
	}
	if got := Makespan(evs); got != 3 {
		t.Errorf("makespan %g, want 3", got)
	}
	if got := Busy(evs, 2); got[0] != 3 || got[1] != 1 {
		t.Errorf("busy %v, want [3 1]", got)
	}
	if got := Bubble(evs, 2); math.Abs(got-1.0/3) > 1e-15 {
		t.Errorf("bubble %g, want 1/3", got)
	}
	nested := []Event{{Rank: 0, Kind: F, Start: 0, End: 3}, {Rank: 0, Kind: W, Start: 1, End: 2}, {Rank: 0, Kind: B, Start: 4, End: 5}}
	if got := Busy(nested, 1); got[0] != 4 {
		t.Errorf("busy of [0,3] ∪ [1,2] ∪ [4,5] = %g, want 4", got[0])
	}
	if got := Bubble(nil, 2); got != 0 {
		t.Errorf("bubble of nothing %g, want 0", got)
	}
}

// Events go to JSON with the kind by name and come back equal.
func TestEventJSON(t *testing.T) {
	evs := []Event{{Rank: 1, Stage: 3, Micro: 2, Kind: SendB, Start: 0.5, End: 1.25}, {Rank: 0, Kind: W, Start: 2, End: 3}}
	b, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"rank":1,"stage":3,"micro":2,"kind":"SEND_B","start":0.5,"end":1.25},{"rank":0,"stage":0,"micro":0,"kind":"W","start":2,"end":3}]`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back []Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if back[i] != evs[i] {
			t.Errorf("event %d back as %+v, want %+v", i, back[i], evs[i])
		}
	}
	if err := json.Unmarshal([]byte(`[{"kind":"Q"}]`), &back); err == nil {
		t.Errorf("unknown kind accepted")
	}
}
