package rt

// The bytes one member sends for each collective under the in-process
// algorithms (the rings of comm.go, the binomial trees of broadcast and
// reduce), for communicators whose library chooses its own algorithms and
// does not report its traffic (MPIComm's, and NCCL's in package cuda):
// charging these keeps their figures comparable with explain's model and
// with the local launcher. Counts are in elements; esize is the element's
// bytes.

// AllReduceSent: the ring's reduce-scatter then all-gather of p balanced
// chunks of numel elements, from member me.
func AllReduceSent(numel, p, me, esize int) int64 {
	c := balanced(numel, p)
	return int64(2*numel-c[me]-c[(me+1)%p]) * int64(esize)
}

// AllGatherSent: the ring forwards every block but the next member's.
func AllGatherSent(counts []int, me, esize int) int64 {
	return int64(sum(counts)-counts[(me+1)%len(counts)]) * int64(esize)
}

// ReduceScatterSent: every chunk but this member's own passes through it
// once; an all-to-all likewise sends every piece but its own.
func ReduceScatterSent(counts []int, me, esize int) int64 {
	return int64(sum(counts)-counts[me]) * int64(esize)
}

// BroadcastSent: member me's copies in the binomial tree from root.
func BroadcastSent(bytes int64, p, me, root int) int64 {
	return int64(treeSends(mod(me-root, p), p)) * bytes
}
