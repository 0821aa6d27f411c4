package allreduce

import "github.com/goddp/goddp/model/half"

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

// SumF16 is what ReduceScatterF16 (Sum) leaves in one element of a segment whose contributions
// vals are given in ReduceOrder (the segment's first sender first, its owner last): the first
// rank's half bits as they are (Sum sends them unscaled), then each next rank's value added in
// float32 and the partial sum rounded to half, nearest even — every hop puts its partial sum on
// the f16 wire, and the owner rounds its last one into its half buffer (f16Buf.reduce). A device
// that reduces the sharded step's f16 gradients itself (ddp.shard_reduce: device) does exactly
// this per element to end with the host ring's bits. Empty vals: 0.
func SumF16(vals []uint16) uint16 {
	if len(vals) == 0 {
		return 0
	}
	t := half.Table()
	acc := vals[0]
	for _, v := range vals[1:] {
		acc = half.FromFloat32(t[acc] + t[v])
	}
	return acc
}
