package allreduce

// The ring schedule, as pure functions: which segment a rank sends and receives at each step,
// where segments and chunks start and end. No I/O here; ring_test.go checks them by table and
// by simulating whole rings.
//
// Ranks form a ring r -> r+1 (mod n). A buffer of count elements is split into n contiguous
// segments of near-equal size. All-reduce is:
//
//   - reduce-scatter, steps 0..n-2: rank r sends segment (r-s) to r+1 and receives segment
//     (r-s-1) from r-1, adding its own values. After step n-2 rank r holds the full sum of
//     segment (r+1): it "owns" that segment.
//   - all-gather, steps 0..n-2: rank r sends segment (r+1-s) and receives segment (r-s), which
//     it stores (and forwards at the next step).
//
// The segment received at reduce-scatter step s is exactly what is sent at step s+1 (and the
// last one, the owned segment, is what all-gather step 0 sends), so every chunk is forwarded the
// moment it has been reduced: that is the pipeline.

func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}

// ringNext and ringPrev are the neighbours of rank in a ring of n.
func ringNext(rank, n int) int { return mod(rank+1, n) }
func ringPrev(rank, n int) int { return mod(rank-1, n) }

// segment is the element range [lo, hi) of segment i when count elements are split among n.
// Sizes differ by at most one; the split is the same on every rank.
func segment(count, n, i int) (lo, hi int) {
	return int(int64(count) * int64(i) / int64(n)), int(int64(count) * int64(i+1) / int64(n))
}

func reduceScatterSendSeg(rank, n, step int) int { return mod(rank-step, n) }
func reduceScatterRecvSeg(rank, n, step int) int { return mod(rank-step-1, n) }
func allGatherSendSeg(rank, n, step int) int     { return mod(rank+1-step, n) }
func allGatherRecvSeg(rank, n, step int) int     { return mod(rank-step, n) }

// ownedSeg is the segment rank holds fully reduced after reduce-scatter.
func ownedSeg(rank, n int) int { return mod(rank+1, n) }

// numChunks is how many chunks of at most chunk elements cover length elements (at least one,
// so that an empty segment still sends one, empty, frame and every step has a message).
func numChunks(length, chunk int) int {
	if length <= 0 {
		return 1
	}
	return (length + chunk - 1) / chunk
}

// chunkRange is chunk c's range within [lo, hi).
func chunkRange(lo, hi, chunk, c int) (clo, chi int) {
	clo = lo + c*chunk
	chi = min(clo+chunk, hi)
	if clo > hi {
		clo = hi
	}
	return clo, chi
}
