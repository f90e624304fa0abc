// Package difftest holds the differential test of random programs: a
// generator of programs on random meshes (every dtype, uneven splits, P
// and P(max) placements, every forward op), each run sharded and on one
// device and compared output by output with check's tolerances. It is a Go
// fuzz target; its seed corpus runs in every go test:
//
//	go test ./internal/difftest -run '^$' -fuzz FuzzShardedEqualsSingle -fuzztime 3m -fuzzminimizetime 2s
//
// (a short minimize time: each new input the coverage finds is otherwise
// minimized for up to a minute, during which no new programs run)
package difftest
