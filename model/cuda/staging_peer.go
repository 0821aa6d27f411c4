//go:build cuda

package cuda

// tensor.PeerShardStaging and tensor.PeerGradStaging for the CUDA device's staging plans
// (ddp.shard_reduce: device; ddp.intra_host: copies): the plan's packed device f16 buffer is
// exported and the peers' mapped (a peerMirror of it, ipc_mirror.go), and a bucket's
// reduce-scatter is device-to-device copies of the peers' ranges into scratch and one kernel
// (staging_peer_kernels.go); the all-gather half (GatherRanges) is copies of the peers' summed
// segments into this rank's buffer and the widen of staging.go. All on the plan's return stream,
// so Finish orders them before the optimizer as it orders Return. First run on an H100 in session 21:
// the sums differed from the host ring's at random with two channels (two ReduceRange calls'
// copies shared the scratch; stagingPeer.mu since), the fix not yet run on a GPU.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

var _ tensor.PeerGradStaging = (*cudaStaging)(nil)

// stagingPeer is a plan's state once NewPeerReduce has run.
type stagingPeer struct {
	m       *peerMirror    // the plan's f16 buffer, exported; the peers', mapped
	scratch *tensor.Tensor // f16: size−1 slots of stride elements, the peers' ranges of one bucket
	stride  int            // the largest segment of any bucket, rounded up to 8 elements
	mod     cudadrv.Module
	fSum    cudadrv.Function
	evSum   []cudadrv.Event // per bucket: recorded on the return stream after ReduceRange's sum
	// mu makes one ReduceRange's copies into the scratch and its sum one run of the return
	// stream: the engine's channels call ReduceRange from their goroutines at once, and d.enter
	// only binds the thread to the context. Without it two buckets' copies could land in the
	// scratch before the first one's sum read it (session 21's GPU run: the sums of the first
	// step differed from the host ring's, at random, at two channels).
	mu sync.Mutex
}

// NewPeerReduce exports the plan's device f16 buffer and allocates the scratch the peers' ranges
// are copied into. The buffer must outlive the peers' last copies of it (ddp's meetings).
func (s *cudaStaging) NewPeerReduce(rank, size int) (tensor.PeerMirror, error) {
	if s.peer != nil {
		return nil, errors.New("cuda: staging: NewPeerReduce twice")
	}
	if s.half.DType() != tensor.F16 {
		return nil, fmt.Errorf("cuda: staging: the peers' reduce-scatter sums f16; this plan stages %s", s.half.DType())
	}
	pm, err := s.d.NewPeerMirror(s.half, rank, size)
	if err != nil {
		return nil, err
	}
	d := s.d
	ptx, err := compileCached(peerReduceKernelSource, []string{fmt.Sprintf("--gpu-architecture=compute_%d%d", d.major, d.minor), "-default-device", "--std=c++17"})
	if err != nil {
		pm.Close()
		return nil, err
	}
	seg := 0
	for i := range s.ranges {
		seg = max(seg, (s.count(i)+size-1)/size) // allreduce's segments differ by one at most
	}
	p := &stagingPeer{m: pm.(*peerMirror), stride: (seg + 7) &^ 7}
	p.scratch = d.Alloc(tensor.F16, "ddp.staging.peer", max(1, (size-1)*p.stride))
	d.enter()
	if p.mod, err = cudadrv.LoadPTX(ptx); err == nil {
		p.fSum, err = p.mod.Function("k_stage_ring_sum")
		for range s.ranges {
			if err != nil {
				break
			}
			var ev cudadrv.Event
			ev, err = cudadrv.NewEvent(false)
			p.evSum = append(p.evSum, ev)
		}
		if err != nil {
			p.release()
		}
	}
	d.leave()
	if err != nil {
		d.Free(p.scratch)
		pm.Close()
		return nil, fmt.Errorf("cuda: staging: the peers' reduce-scatter kernel: %w", err)
	}
	s.peer = p
	return stagingPeerLink{s}, nil
}

// stagingPeerLink is the PeerMirror NewPeerReduce returns: the plan's peerMirror, whose Close
// also waits for the return stream (the plan's copies out of the peers' buffers run there) and
// frees the scratch.
type stagingPeerLink struct{ s *cudaStaging }

func (l stagingPeerLink) Handle() []byte                 { return l.s.peer.m.Handle() }
func (l stagingPeerLink) Connect(handles [][]byte) error { return l.s.peer.m.Connect(handles) }
func (l stagingPeerLink) Pull(peer, lo, hi int)          { l.s.peer.m.Pull(peer, lo, hi) }

func (l stagingPeerLink) Close() error {
	s, p := l.s, l.s.peer
	if p == nil {
		return nil
	}
	d := s.d
	d.enter()
	err := s.ret.Sync()
	d.leave()
	err = errors.Join(err, p.m.Close())
	d.enter()
	p.release()
	d.leave()
	d.Free(p.scratch)
	s.peer = nil
	return err
}

// release destroys the events and unloads the module (the caller holds the thread).
func (p *stagingPeer) release() {
	var zero cudadrv.Event
	for _, ev := range p.evSum {
		if ev != zero {
			ev.Destroy()
		}
	}
	p.mod.Unload()
}

// StageDevice casts bucket i into its device f16 buffer on the compute stream and records its
// event; nothing is copied to pinned memory.
func (s *cudaStaging) StageDevice(i int, scale float32) {
	n := s.count(i)
	d := s.d
	d.enter()
	defer d.leave()
	s.launch1(s.fCast, d.stream, n, s.halfPtr(i), s.gradPtr(i), uint64(n), f32a(scale))
	must(s.evCast[i].Record(d.stream))
}

// WaitStaged waits for StageDevice's cast of bucket i (its event only).
func (s *cudaStaging) WaitStaged(i int) {
	s.d.enter()
	defer s.d.leave()
	must(s.evCast[i].Sync())
}

// ReduceRange enqueues, on the return stream, the copies of [lo, hi) of bucket i out of the
// peers' buffers (in order, skipping this rank) into the scratch slots, then the sum into this
// rank's buffer and the slab (k_stage_ring_sum). A failure to enqueue panics, as a launch's does.
func (s *cudaStaging) ReduceRange(i, lo, hi int, order []int) {
	s.checkSeg(i, lo, hi)
	p := s.peer
	if p == nil || !p.m.connected || len(order) != p.m.size || hi-lo > p.stride {
		panic(fmt.Sprintf("cuda: staging: ReduceRange of bucket %d [%d,%d), order %v: not connected, or not this plan's segments", i, lo, hi, order))
	}
	d := s.d
	d.enter()
	defer d.leave()
	p.mu.Lock()
	defer p.mu.Unlock()
	if hi > lo {
		s.sumRange(i, lo, hi, order)
	}
	must(p.evSum[i].Record(s.ret)) // WaitReduced's: after the sum (an empty segment has none)
}

// sumRange is ReduceRange's copies and sum of a non-empty segment (the caller holds the thread).
func (s *cudaStaging) sumRange(i, lo, hi int, order []int) {
	p, n := s.peer, hi-lo
	must(s.ret.Wait(s.evCast[i])) // this rank's cast (WaitStaged saw it done; the device's order too)
	slot, ownAt := 0, -1
	for k, q := range order {
		if q == p.m.rank {
			ownAt = k
			continue
		}
		dst := dptr(p.scratch) + uint64(slot*p.stride)*2
		if err := cudadrv.DtoD(dst, p.m.peers[q]+uint64(s.off[i]+lo)*2, int64(n)*2, s.ret); err != nil {
			panic(fmt.Sprintf("cuda: staging: copying [%d,%d) of bucket %d from rank %d: %v", lo, hi, i, q, err))
		}
		slot++
	}
	if ownAt < 0 {
		panic(fmt.Sprintf("cuda: staging: ReduceRange order %v without this rank %d", order, p.m.rank))
	}
	s.launch1(p.fSum, s.ret, n, s.halfPtr(i)+uint64(lo)*2, s.gradPtr(i)+uint64(lo)*4, dptr(p.scratch),
		uint64(n), uint64(p.stride), uint64(len(order)), uint64(ownAt))
}

// WaitReduced waits for ReduceRange's sum of bucket i (its event only, not the device): this
// rank's copies out of its peers' buffers are done, and its own segment holds the sum.
func (s *cudaStaging) WaitReduced(i int) {
	s.d.enter()
	defer s.d.leave()
	must(s.peer.evSum[i].Sync())
}

// ReleaseHost frees the plan's pinned buffer once its all-reduce goes by copies (ddp.intra_host:
// copies): the copies it served are waited for first. Stage, Host and Return must not follow.
func (s *cudaStaging) ReleaseHost() {
	if s.pinned == nil {
		return
	}
	d := s.d
	d.enter()
	var zero cudadrv.Stream
	for _, st := range []cudadrv.Stream{s.d2h, s.ret} {
		if st != zero {
			must(st.Sync())
		}
	}
	d.leave()
	d.pinnedCounter().Add(-s.pinned.Bytes())
	s.pinned.Free()
	s.pinned = nil
}

// GatherRanges enqueues, on the return stream, the copies of every other rank's segment segs[q]
// of bucket i out of its buffer into the same offsets of this rank's, then the widen of the whole
// bucket into the slab (this rank's own segment too: the sum ReduceRange widened, the same bits).
// A failure to enqueue panics, as a launch's does.
func (s *cudaStaging) GatherRanges(i int, segs [][2]int) {
	p := s.peer
	if p == nil || !p.m.connected || len(segs) != p.m.size {
		panic(fmt.Sprintf("cuda: staging: GatherRanges of bucket %d, segments %v: not connected, or not one a rank", i, segs))
	}
	d := s.d
	d.enter()
	defer d.leave()
	for q, sg := range segs {
		lo, hi := sg[0], sg[1]
		s.checkSeg(i, lo, hi)
		if q == p.m.rank || hi == lo {
			continue
		}
		at := uint64(s.off[i]+lo) * 2
		if err := cudadrv.DtoD(dptr(s.half)+at, p.m.peers[q]+at, int64(hi-lo)*2, s.ret); err != nil {
			panic(fmt.Sprintf("cuda: staging: copying [%d,%d) of bucket %d from rank %d: %v", lo, hi, i, q, err))
		}
	}
	n := s.count(i)
	s.launch1(s.fWiden, s.ret, n, s.gradPtr(i), s.halfPtr(i), uint64(n))
}
