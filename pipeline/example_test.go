package pipeline_test

import (
	"fmt"

	"github.com/meshrun/meshrun/pipeline"
)

// Generate 1F1B on two ranks, place its messages, dry-run it with equal
// forward and backward times and draw it.
func Example() {
	s, err := pipeline.FromSpec("1f1b", 2, 3)
	if err != nil {
		panic(err)
	}
	fmt.Print(s)
	withComm, err := s.WithComm()
	if err != nil {
		panic(err)
	}
	events, err := pipeline.Simulate(withComm, pipeline.Cost{F: 1, B: 1})
	if err != nil {
		panic(err)
	}
	fmt.Print(pipeline.Gantt(events, s.Ranks, 0))
	formula, text, _ := pipeline.Formula("1f1b", 2, 3, 0)
	fmt.Printf("simulated %.3f, formula %s = %.3f\n", pipeline.Bubble(events, s.Ranks), text, formula)
	// Output:
	// schedule 1f1b ranks=2 stages=2 micro=3 stage-rank=0,1
	// rank 0: 0F0 0F1 0B0 0F2 0B1 0B2
	// rank 1: 1F0 1B0 1F1 1B1 1F2 1B2
	// rank 0 |F0 F1 ...B0 F2 B1 ...B2 |
	// rank 1 |...F0 B0 F1 B1 F2 B2 ...|
	//        +--------------+---------
	//        0              5
	// makespan 8, bubble 25.0% (idle rank-time / (ranks × makespan)); '.' idle, F forward, B backward, I input-gradient, W weight-gradient
	// simulated 0.250, formula (K−1)/(M+K−1) = 0.250
}
