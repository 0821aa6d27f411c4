package cuda

// ipcStalledPeer says which peer a rank whose IPC all-reduce is paced by its stream
// (GODDP_IPC_WAIT=stream, ipc_pace.go) was waiting for when it gave up. flags[ph][q] is the last
// launch number rank q wrote into this rank's slot of meeting ph (0: none yet); this rank writes
// its own slot too, so flags[ph][rank] is how far its own stream got. A rank's progress is its
// latest meeting, (launch, phase) in that order; the peer returned is the one furthest behind,
// provided it is behind this rank, else -1 (every peer as far as this rank: it was waiting for
// none of them). Ties go to the lowest rank. Pure: it runs without a GPU (ipc_stalled_test.go).
func ipcStalledPeer(flags [3][]uint32, rank int) int {
	progress := func(q int) uint64 {
		var p uint64
		for ph := range flags {
			if e := flags[ph][q]; e != 0 {
				p = max(p, uint64(e)<<2|uint64(ph)+1)
			}
		}
		return p
	}
	own, worst, at := progress(rank), uint64(0), -1
	for q := range flags[0] {
		if q == rank {
			continue
		}
		if p := progress(q); p < own && (at < 0 || p < worst) {
			worst, at = p, q
		}
	}
	return at
}
