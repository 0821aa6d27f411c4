package allreduce

// The schedule a device all-reduce follows (model/cuda's over CUDA IPC buffers, wired by ddp),
// as pure functions: the ring's, so that a device that reads every peer's buffer directly adds
// the same values in the same order as the host ring does and every rank agrees on who reduces
// what. allreduce knows nothing of the device; the device nothing of allreduce.
//
// Rank r reduces Segment(count, size, r), the ring's owned segment, and the others copy it from
// r. The ring adds that segment's contributions hop by hop, starting with the rank that sends it
// at reduce-scatter step 0 and ending with its owner: ReduceOrder. With f32 values and the f32
// wire a device that adds in that order, in f32, ends with the host ring's bits (Sum; Avg also
// divides the full sum by size once, as the ring's owner does); with a 16-bit wire the ring rounds
// each partial sum to the wire and the device rounds once, so the two agree within the wire's
// rounding per hop.

// ReduceOrder is the order in which the ring adds the ranks' values into the segment rank owns:
// rank+1, rank+2, …, rank (mod size).
func ReduceOrder(size, rank int) []int {
	seg := ownedSeg(rank, size)
	out := make([]int, size)
	for k := range out {
		// The segment's first sender is the rank whose reduce-scatter step 0 sends it; each hop
		// adds the next rank's values.
		out[k] = mod(seg+k, size)
	}
	return out
}
