package ddp

// engine_peer.go: ddp.intra_host: copies — the unsharded staged path's all-reduce of the f16
// gradients (engine_gpu.go) as copies between the devices of one host: shard_peer_reduce.go's
// reduce-scatter, then an all-gather of the summed segments by copies too. Issue 34's all-reduce
// without a kernel (or a stream) that waits on another process: the ranks meet on the host, and
// the device only copies and adds. Run on an H100 (sessions 21–22): the all-reduce and six steps
// of training the host ring's bits (after session 21's fix of the plan's scratch, shared by two
// channels' calls); GPT-2 small sharing the GPU, a step of 46.00 ms at N = 2 and 93.93 at N = 4
// against the host path's 55.66 and 123.86 (docs/perf-gpu-ddp.md). ddp.intra_host: auto takes it
// where the ranks share one GPU (worker/intrahost.go).
//
// Every rank maps its peers' device f16 staging buffers once (UsePeerCopies: the setup of
// UsePeerReduce, connectPeerStaging), and a bucket's all-reduce is:
//
//  1. the training goroutine casts the bucket into its device buffer (StageDevice; nothing goes
//     to pinned memory); the bucket's comm goroutine waits for that cast (WaitStaged), then the
//     ranks meet once over the bucket's channel (an all-gather of one byte): every rank's f16
//     values of the bucket are written;
//  2. each rank sums its own segment (allreduce.Segment: the one the host ring's reduce-scatter
//     leaves it) as under ddp.shard_reduce: device: the segment copied out of the n−1 peers'
//     buffers, one kernel adding the n contributions in the ring's order with its roundings
//     (allreduce.SumF16), the sum written into the segment of its own buffer (ReduceRange, on
//     the return stream);
//  3. the comm goroutine waits for that sum (WaitReduced: its event, not the device), the ranks
//     meet a second time over the channel, and each rank copies every peer q's summed segment out
//     of q's buffer into the same offsets of its own, then widens the bucket into the gradient
//     slab (GatherRanges, on the return stream: Finish orders it before the optimizer, as
//     Return's).
//
// The result is the host ring's AllReduceF16 bit for bit: its reduce-scatter's sums
// (TestSumF16_isTheRingsReduceScatterF16 in allreduce), then its all-gather, which carries each
// owner's half bits unchanged, as a copy does (TestPeerCopies_bitIdenticalToHostRing here, at
// W = 2, 3 and 4; a bucket smaller than W leaves some ranks an empty segment, which they neither
// sum nor send).
//
// Why the meetings suffice (r, q: two ranks; bucket i of step N):
//   - r's step 2 reads segment r of q's buffer after q's cast: meeting 1 comes after every rank's
//     WaitStaged.
//   - r's step 3 reads segment q of q's buffer after q's sum is there: meeting 2 comes after
//     every rank's WaitReduced. And r's step 3 overwrites segment q of its own buffer only after
//     q has copied it out in step 2: q's sum runs on q's return stream after its copies, q's
//     WaitReduced waits for the sum, meeting 2 comes after it. Nobody reads segment r of r's
//     buffer in step 2 but r, so r's sum may land there while its peers still copy their own
//     segments (and before meeting 2 every peer's reads of r's buffer are step 2's).
//   - r casts step N+1's bucket i over its buffer only after every peer's step-3 copies out of it:
//     Wait, after every bucket's GatherRanges was enqueued and Finish made the compute stream
//     wait for the return stream, waits for the device (Sync) and meets the ranks
//     (peerReduceMeet), as under ddp.shard_reduce: device; r's next casts come after its Wait.
//     The same meeting keeps r's buffers alive until its peers' last copies (Close after Wait).
//
// TestPeerCopies_meetingsOrderTheCopies runs backward and Wait alone under the race detector:
// without meeting 2 or the meeting at the end of Wait a copy races the peer's write.
//
// Cost against the host path (docs/perf-gpu-ddp.md, "Plan: the unsharded all-reduce by
// copies"): nothing crosses PCIe or the host ring; each rank copies 2(n−1)/n of the bucket
// device to device and the ranks meet twice a bucket and once a step on the host.

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// PeerCopiesRefusal says why UsePeerCopies would refuse this engine (nil: it would try; also nil
// alone, where nothing is reduced). The same on every rank of a run: it reads the configuration
// and the device's kind only.
func (e *Engine) PeerCopiesRefusal() error {
	switch {
	case e.comm.Size() < 2:
		return nil
	case e.shard != nil:
		return errors.New("ddp.intra_host: copies with ddp.shard_optimizer: the sharded step reduce-scatters by device copies with ddp.shard_reduce: device")
	case e.gpu == nil || e.opts.Wire != allreduce.WireF16:
		return errors.New("ddp.intra_host: copies needs the staged path with the f16 wire (--device cuda, precision fp16); this run reduces otherwise")
	}
	if _, ok := e.gpu.stg.(tensor.PeerGradStaging); !ok {
		return fmt.Errorf("ddp.intra_host: copies: device %s cannot map its peers' staging buffers (a CUDA build can)", e.dev.Name())
	}
	return nil
}

// UsePeerCopies switches the unsharded staged path's all-reduce of the gradients to copies
// between the devices (the file's comment). It is a collective of the engine's group, like
// UsePeerReduce: call it on every rank after New and before the first step, only where every
// rank is on this host. A rank that cannot still takes part in both exchanges, so every rank
// fails alike, naming the rank; a device's failure wraps ErrPeerSetup on every rank.
func (e *Engine) UsePeerCopies(ctx context.Context) error {
	if e.comm.Size() < 2 {
		return nil // alone: nothing is reduced
	}
	p, err := e.connectPeerStaging(ctx, e.PeerCopiesRefusal(), func() tensor.PeerShardStaging {
		return e.gpu.stg.(tensor.PeerGradStaging)
	})
	if err != nil {
		return err
	}
	p.all = p.stg.(tensor.PeerGradStaging)
	p.all.ReleaseHost() // nothing goes through pinned memory from now on
	e.peerRed = p
	e.log.Info("ddp: the f16 gradients are all-reduced by copies between the devices (ddp.intra_host: copies); nothing goes through pinned memory or the host ring",
		"ranks", e.comm.Size(), "buckets", len(e.buckets), "device_f16", tensor.FormatBytes(e.gpu.stg.DeviceBytes()))
	return nil
}

// PeerCopies reports whether UsePeerCopies switched the all-reduce to the devices.
func (e *Engine) PeerCopies() bool { return e.peerRed != nil && e.peerRed.all != nil }

// gatherPeer is reducePeer's step 3 under UsePeerCopies: the wait for this rank's sum, the
// second meeting, then the copies of the peers' sums and the widen.
func (e *Engine) gatherPeer(ch int, b *bucket) error {
	p := e.peerRed
	p.all.WaitReduced(b.index)
	if _, err := e.comms[ch].AllGather(e.ctx, []byte{1}); err != nil {
		return fmt.Errorf("ddp: the ranks' meeting before the all-gather of gradient bucket %d (%s, device copies): %w", b.index, b.params[0].Name, err)
	}
	n := e.comm.Size()
	segs := make([][2]int, n)
	for q := range segs {
		segs[q][0], segs[q][1] = allreduce.Segment(b.hi-b.lo, n, q)
	}
	p.all.GatherRanges(b.index, segs)
	return nil
}
