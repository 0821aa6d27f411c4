package cuda

// The IPC all-reduce's schedule on one rank, apart from the GPU so that it runs anywhere: which
// halves a launch runs, and the order of meetings and kernels when the stream paces it
// (GODDP_IPC_WAIT=stream, ipc_pace.go). ipc_schedule_test.go runs that order for several ranks
// under random interleavings against a model of the buffers and flags.

// The halves argument of k_ipc_allreduce: which halves of the all-reduce a launch runs.
const (
	ipcReduce    = 1
	ipcGather    = 2
	ipcBoth      = ipcReduce | ipcGather
	ipcReduceEnd = 4 // with ipcReduce alone: a last meeting, every peer done reading this buffer
	ipcPaced     = 8 // the stream held the meetings: the kernel holds none
)

// ipcOpKind is one step of a paced launch on the rank's stream.
type ipcOpKind int

const (
	ipcArrive       ipcOpKind = iota // k_ipc_arrive: this rank's number into its slot of every rank's flags
	ipcWait                          // cuStreamWaitValue32 on each peer's slot of this rank's flags
	ipcReduceKernel                  // k_ipc_allreduce, halves ipcReduce|ipcPaced: this rank's segment reduced
	ipcGatherKernel                  // k_ipc_allreduce, halves ipcGather|ipcPaced: the others' segments copied in
)

// ipcOp is a step and, for a meeting's, its phase.
type ipcOp struct {
	kind  ipcOpKind
	phase int
}

// ipcPacedOps is what a launch of halves enqueues on the stream, in order: the kernel's own
// meetings (ipc_kernels.go) around kernels that never wait. Meeting 0: every rank's buffer holds
// its values; 1: every segment is reduced (before a gather, or at the end of a reduce half used
// alone, ipcReduceEnd); 2: every rank has copied (before any rank rewrites its buffer).
func ipcPacedOps(halves int) []ipcOp {
	meet := func(ph int) []ipcOp { return []ipcOp{{ipcArrive, ph}, {ipcWait, ph}} }
	var ops []ipcOp
	if halves&ipcReduce != 0 {
		ops = append(append(ops, meet(0)...), ipcOp{kind: ipcReduceKernel})
	}
	if halves&(ipcGather|ipcReduceEnd) != 0 {
		ops = append(ops, meet(1)...)
	}
	if halves&ipcGather != 0 {
		ops = append(append(ops, ipcOp{kind: ipcGatherKernel}), meet(2)...)
	}
	return ops
}
