package allreduce

import "testing"

func TestRing_segments(t *testing.T) {
	for _, tc := range []struct {
		count, n int
		want     [][2]int
	}{
		{10, 3, [][2]int{{0, 3}, {3, 6}, {6, 10}}},
		{2, 4, [][2]int{{0, 0}, {0, 1}, {1, 1}, {1, 2}}},
		{8, 2, [][2]int{{0, 4}, {4, 8}}},
		{1, 1, [][2]int{{0, 1}}},
	} {
		for i, w := range tc.want {
			if lo, hi := segment(tc.count, tc.n, i); lo != w[0] || hi != w[1] {
				t.Errorf("segment(%d,%d,%d) = [%d,%d), want [%d,%d)", tc.count, tc.n, i, lo, hi, w[0], w[1])
			}
		}
	}
}

func TestRing_schedule(t *testing.T) {
	// n=4, rank 1: reduce-scatter sends 1,0,3 and receives 0,3,2; owns 2; all-gather sends
	// 2,1,0 and receives 1,0,3.
	n, r := 4, 1
	var rsS, rsR, agS, agR []int
	for s := range n - 1 {
		rsS = append(rsS, reduceScatterSendSeg(r, n, s))
		rsR = append(rsR, reduceScatterRecvSeg(r, n, s))
		agS = append(agS, allGatherSendSeg(r, n, s))
		agR = append(agR, allGatherRecvSeg(r, n, s))
	}
	for _, tc := range []struct {
		name      string
		got, want []int
	}{
		{"rs send", rsS, []int{1, 0, 3}}, {"rs recv", rsR, []int{0, 3, 2}},
		{"ag send", agS, []int{2, 1, 0}}, {"ag recv", agR, []int{1, 0, 3}},
	} {
		for i := range tc.want {
			if tc.got[i] != tc.want[i] {
				t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
				break
			}
		}
	}
	if o := ownedSeg(r, n); o != 2 {
		t.Errorf("ownedSeg = %d, want 2", o)
	}
}

// TestRing_simulate runs the schedule on integers for many worlds: every rank must end with
// the full sum, and what a rank receives at each step must be what its predecessor sent.
func TestRing_simulate(t *testing.T) {
	for n := 1; n <= 9; n++ {
		// seg[r][i] = sum of contributions to segment i held by rank r (as a bitmask of ranks).
		seg := make([][]uint64, n)
		for r := range seg {
			seg[r] = make([]uint64, n)
			for i := range seg[r] {
				seg[r][i] = 1 << r
			}
		}
		for s := range n - 1 {
			sent := make([]uint64, n)
			for r := range n {
				sent[r] = seg[r][reduceScatterSendSeg(r, n, s)]
			}
			for r := range n {
				p := ringPrev(r, n)
				if reduceScatterSendSeg(p, n, s) != reduceScatterRecvSeg(r, n, s) {
					t.Fatalf("n=%d step %d: rank %d receives a segment its predecessor does not send", n, s, r)
				}
				seg[r][reduceScatterRecvSeg(r, n, s)] |= sent[p]
			}
		}
		all := uint64(1)<<n - 1
		for r := range n {
			if seg[r][ownedSeg(r, n)] != all {
				t.Fatalf("n=%d: rank %d owns an incomplete segment %b", n, r, seg[r][ownedSeg(r, n)])
			}
			if n > 1 && allGatherSendSeg(r, n, 0) != ownedSeg(r, n) {
				t.Fatalf("n=%d: all-gather does not start from the owned segment", n)
			}
		}
		for s := range n - 1 {
			sent := make([]uint64, n)
			for r := range n {
				sent[r] = seg[r][allGatherSendSeg(r, n, s)]
			}
			for r := range n {
				seg[r][allGatherRecvSeg(r, n, s)] = sent[ringPrev(r, n)]
			}
		}
		for r := range n {
			for i := range n {
				if seg[r][i] != all {
					t.Fatalf("n=%d: rank %d segment %d = %b after all-gather", n, r, i, seg[r][i])
				}
			}
		}
	}
}

func TestRing_chunks(t *testing.T) {
	for _, tc := range []struct{ lo, hi, chunk, want int }{
		{0, 0, 4, 1}, {0, 1, 4, 1}, {0, 4, 4, 1}, {0, 5, 4, 2}, {3, 13, 4, 3},
	} {
		if got := numChunks(tc.hi-tc.lo, tc.chunk); got != tc.want {
			t.Errorf("numChunks(%d,%d) = %d, want %d", tc.hi-tc.lo, tc.chunk, got, tc.want)
		}
		next := tc.lo
		for k := range tc.want {
			clo, chi := chunkRange(tc.lo, tc.hi, tc.chunk, k)
			if clo != next || chi < clo || chi-clo > tc.chunk {
				t.Errorf("chunkRange(%d,%d,%d,%d) = [%d,%d)", tc.lo, tc.hi, tc.chunk, k, clo, chi)
			}
			next = chi
		}
		if next != tc.hi {
			t.Errorf("chunks of [%d,%d) end at %d", tc.lo, tc.hi, next)
		}
	}
}
