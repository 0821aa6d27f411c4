package allreduce

// The hierarchical schedule, as pure functions (no I/O; hier_test.go checks them by table and
// by simulating whole clusters), in the style of ring.go.
//
// A world of hosts × local ranks is numbered host by host, as torchrun and ddplaunch number it:
// global rank = host·local + localRank. An all-reduce of count elements is three rings:
//
//   - inside each host, a reduce-scatter among its local ranks: local rank i ends owning the
//     host's sum of its share, segment i of the split among local (hierShare, the ring's owned
//     segment of the local ring: Segment(count, local, i));
//   - between hosts, local rank i of every host all-reduces that share (the flat ring of ring.go
//     over hosts ranks, each the i-th local rank of its host): local ranks of one index form one
//     inter-host ring, so a host's links between hosts carry count/local elements each, together
//     the buffer once;
//   - inside each host, an all-gather: every local rank contributes its share.
//
// Every rank ends with every other rank's contribution added exactly once; the order of the
// additions differs from the flat ring's, so the result equals the flat ring's within f32
// rounding (not bit for bit), and is bit-identical on every rank of the world.

// hierHost and hierLocal are global rank's host and its local rank on it.
func hierHost(rank, local int) int  { return rank / local }
func hierLocal(rank, local int) int { return rank % local }

// hierRank is the global rank of localRank on host.
func hierRank(host, localRank, local int) int { return host*local + localRank }

// intraMembers are the global ranks of host's ring, indexed by local rank.
func intraMembers(host, local int) []int {
	out := make([]int, local)
	for i := range out {
		out[i] = hierRank(host, i, local)
	}
	return out
}

// interMembers are the global ranks of local rank localRank's ring between hosts, indexed by host.
func interMembers(localRank, local, hosts int) []int {
	out := make([]int, hosts)
	for h := range out {
		out[h] = hierRank(h, localRank, local)
	}
	return out
}

// hierShare is the element range [lo, hi) of a count-element buffer that localRank carries
// between hosts: the segment the host's reduce-scatter leaves reduced on it.
func hierShare(count, local, localRank int) (lo, hi int) { return Segment(count, local, localRank) }
