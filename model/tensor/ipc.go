package tensor

import "fmt"

// IPCDevice is an optional Device ability: an all-reduce that runs on the device over the
// buffers of every rank of a host, each mapped into the others (CUDA IPC; the CUDA device has it,
// model/cuda/ipc.go). Gradients then never leave the device inside a host (issue 34).
//
// One reducer's life, on every rank:
//
//	NewIPCReducer(buf, plan)  maps nothing yet: allocates the rank's flags and exports buf's and
//	                          their handles
//	Handle()                  this rank's export; the caller sends it to every peer over the
//	                          process group (the authenticated control plane, never a socket of
//	                          its own) and gathers theirs
//	Connect(handles)          maps the peers' buffers and flags (peer access where devices differ)
//	AllReduce(avg)            enqueues the all-reduce of buf on the device's compute stream and
//	                          returns: no host wait, per chunk or at all; ranks pace each other
//	                          by flags in device memory
//	Close()                   after the last AllReduce has finished on every rank (a barrier):
//	                          unmaps the peers and frees the flags
//
// The schedule is the caller's (IPCPlan, built from allreduce's ring functions, which know
// nothing of devices): rank r reduces Segments[r], adding every rank's values in its Order in
// f32 and rounding once to buf's dtype (f32, f16 or bf16); the other ranks copy that segment from
// it. Every rank therefore ends with the same bits.
type IPCDevice interface {
	Device
	NewIPCReducer(buf *Tensor, plan IPCPlan) (IPCReducer, error)
}

// IPCPlan is the all-reduce's schedule on one rank.
type IPCPlan struct {
	Rank, Size int
	// Segments[r] is the element range [lo, hi) of buf that rank r reduces; they tile buf.
	Segments [][2]int
	// Order is the ranks whose values this rank adds into its segment, in the order added (each
	// rank once).
	Order []int
}

// Check says what is wrong with p for a buffer of n elements, or nil.
func (p IPCPlan) Check(n int) error {
	if p.Size < 1 || p.Rank < 0 || p.Rank >= p.Size {
		return fmt.Errorf("tensor: IPC plan: rank %d of %d", p.Rank, p.Size)
	}
	if len(p.Segments) != p.Size || len(p.Order) != p.Size {
		return fmt.Errorf("tensor: IPC plan: %d segments and %d ranks in the order for %d ranks", len(p.Segments), len(p.Order), p.Size)
	}
	covered := 0
	for r, s := range p.Segments {
		if s[0] < 0 || s[1] < s[0] || s[1] > n {
			return fmt.Errorf("tensor: IPC plan: segment of rank %d [%d,%d) outside [0,%d)", r, s[0], s[1], n)
		}
		for q := range r {
			if o := p.Segments[q]; s[0] < o[1] && o[0] < s[1] {
				return fmt.Errorf("tensor: IPC plan: segments of ranks %d and %d overlap", q, r)
			}
		}
		covered += s[1] - s[0]
	}
	if covered != n {
		return fmt.Errorf("tensor: IPC plan: segments cover %d of %d elements", covered, n)
	}
	seen := make([]bool, p.Size)
	for _, r := range p.Order {
		if r < 0 || r >= p.Size || seen[r] {
			return fmt.Errorf("tensor: IPC plan: order %v is not each rank once", p.Order)
		}
		seen[r] = true
	}
	return nil
}

// IPCReducer is one buffer's device all-reduce (see IPCDevice).
type IPCReducer interface {
	Handle() []byte
	// Connect takes every rank's Handle, by rank (handles[Rank] is this rank's own).
	Connect(handles [][]byte) error
	// AllReduce sums buf across the ranks (avg: multiplies each value by 1/Size first in f32 for
	// 16-bit data, divides the f32 sum by Size for f32 data, as allreduce's Avg does).
	AllReduce(avg bool)
	Close() error
}

// PeerMirrorDevice is an optional ability of a device whose ranks on one host can read each
// other's memory (the CUDA device: CUDA IPC): NewPeerMirror exports t's memory and, once
// connected, copies ranges of the peers' tensors of the same dtype and length into t. ddp's
// sharded step gathers its 16-bit weights so (ddp.shard_gather: device), with no kernel waiting on
// another process: each rank copies its peers' owned segments straight into its own copy after
// one meeting of the ranks on the host.
type PeerMirrorDevice interface {
	NewPeerMirror(t *Tensor, rank, size int) (PeerMirror, error)
}

// PeerMirror is one tensor shared with the peers of a host (see PeerMirrorDevice).
//
//	Handle   what this rank tells the others (exchanged over the process group)
//	Connect  takes every rank's Handle, by rank (handles[rank] is this rank's own), maps the
//	         peers' tensors and checks they are alike
//	Pull     t[lo:hi) = peer's t[lo:hi), enqueued on the device's stream after the work already
//	         enqueued there and before what follows; the caller makes sure the peer has written
//	         those elements and does not write them until the copy is done
//	Close    waits for this rank's copies, then unmaps the peers' tensors (t stays this rank's:
//	         it must outlive the peers' last Pull of it)
type PeerMirror interface {
	Handle() []byte
	Connect(handles [][]byte) error
	Pull(peer, lo, hi int)
	Close() error
}
