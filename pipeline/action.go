package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is what an action does.
type Kind uint8

const (
	F     Kind = iota // forward
	I                 // backward for the stage's input (first half of a split B)
	W                 // backward for the stage's weights (second half of a split B)
	B                 // full backward, I and W together
	SendF             // send the stage's output activation to the next stage
	RecvF             // receive the previous stage's activation
	SendB             // send the gradient of the stage's input to the previous stage
	RecvB             // receive the next stage's gradient

	// Data-parallel hooks concern a stage's parameters, not a micro-batch
	// (their Micro is -1 and their text has none): the collectives on the
	// other mesh axes that lowering schedules around the pipeline's work.
	Unshard    // gather the stage's sharded parameters (ZeRO-3) before use
	Reshard    // free the gathered parameters again
	ReduceGrad // reduce the stage's accumulated gradients across data parallelism
)

var kindNames = [...]string{F: "F", I: "I", W: "W", B: "B",
	SendF: "SEND_F", RecvF: "RECV_F", SendB: "SEND_B", RecvB: "RECV_B",
	Unshard: "UNSHARD", Reshard: "RESHARD", ReduceGrad: "REDUCE_GRAD"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind reads a kind's name as String writes it ("F", "SEND_B").
func ParseKind(name string) (Kind, error) {
	for k, n := range kindNames {
		if n == name {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown action kind %q (want one of %s)", name, strings.Join(kindNames[:], ", "))
}

// MarshalText writes the kind's name, so that events read well as JSON.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) {
		return nil, fmt.Errorf("no name for %v", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	kind, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = kind
	return nil
}

// IsCompute reports whether k is F, I, W or B.
func (k Kind) IsCompute() bool { return k <= B }

// IsComm reports whether k is a send or a receive.
func (k Kind) IsComm() bool { return k >= SendF && k <= RecvB }

// IsHook reports whether k is a data-parallel hook (UNSHARD, RESHARD,
// REDUCE_GRAD).
func (k Kind) IsHook() bool { return k >= Unshard && k <= ReduceGrad }

// IsBackward reports whether k computes the input gradient (I or B): the
// action that the previous stage waits for.
func (k Kind) IsBackward() bool { return k == I || k == B }

// Action is one step of one rank: a stage's work on a micro-batch.
type Action struct {
	Stage, Micro int
	Kind         Kind
	Peer         int // the other rank of a SEND or RECV; -1 for compute
}

// Compute returns a compute action (Peer -1).
func Compute(stage int, k Kind, micro int) Action {
	return Action{Stage: stage, Micro: micro, Kind: k, Peer: -1}
}

// Hook returns a data-parallel hook action of a stage (Micro and Peer -1).
func Hook(stage int, k Kind) Action {
	return Action{Stage: stage, Micro: -1, Kind: k, Peer: -1}
}

// String gives the text form: stage, kind, micro-batch ("1F3", "2SEND_B0"),
// or stage and kind for a hook ("0REDUCE_GRAD").
func (a Action) String() string {
	if a.Kind.IsHook() {
		return strconv.Itoa(a.Stage) + a.Kind.String()
	}
	return strconv.Itoa(a.Stage) + a.Kind.String() + strconv.Itoa(a.Micro)
}

// ParseAction reads the text form written by String. The peer of a
// communication action is not part of the text; it is -1 here and
// ParseSchedule fills it in from the stage placement.
func ParseAction(s string) (Action, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	j := len(s)
	for j > i && s[j-1] >= '0' && s[j-1] <= '9' {
		j--
	}
	if i == 0 {
		return Action{}, fmt.Errorf("action %q: want stage, kind, micro-batch (e.g. 1F3, 2SEND_B0, 0REDUCE_GRAD)", s)
	}
	stage, err := strconv.Atoi(s[:i])
	if err != nil {
		return Action{}, fmt.Errorf("action %q: stage out of range", s)
	}
	kind, err := ParseKind(strings.ToUpper(s[i:j]))
	if err != nil {
		return Action{}, fmt.Errorf("action %q: %v", s, err)
	}
	switch {
	case kind.IsHook() && j < len(s):
		return Action{}, fmt.Errorf("action %q: %s concerns a whole stage and takes no micro-batch", s, kind)
	case kind.IsHook():
		return Hook(stage, kind), nil
	case j == len(s):
		return Action{}, fmt.Errorf("action %q: no micro-batch after the kind", s)
	}
	micro, err := strconv.Atoi(s[j:])
	if err != nil {
		return Action{}, fmt.Errorf("action %q: micro-batch out of range", s)
	}
	return Action{Stage: stage, Micro: micro, Kind: kind, Peer: -1}, nil
}
