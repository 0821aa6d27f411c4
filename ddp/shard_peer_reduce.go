package ddp

// shard_peer_reduce.go: ddp.shard_reduce: device — the sharded staged path's reduce-scatter of the
// f16 gradients (shard_gpu.go, step 1) as copies between the devices of one host, the other half
// of shard_peer.go's gather. Run on an H100 in session 21: the sums differed from the host ring's
// at two channels (the plan's scratch race); fixed in model/cuda, the training test passed three
// times running in session 22.
//
// On the staged path each complete bucket is cast to f16 in the plan's device buffer, copied to
// pinned memory, reduce-scattered on the host ring and its owned segment copied back: for GPT-2
// small at W = 2, ~125 MB each way through pinned memory per rank and step at ~6 GB/s. Here every
// rank maps its peers' device f16 staging buffers once (tensor.PeerShardStaging.NewPeerReduce,
// CUDA IPC), and a bucket's reduce-scatter is:
//
//  1. the training goroutine casts the bucket into its device buffer (StageDevice; nothing goes
//     to pinned memory); the bucket's comm goroutine waits for that cast alone (WaitStaged: its
//     event, not the device), then the ranks meet once over the bucket's channel (an all-gather
//     of one byte): every rank's f16 values of the bucket are written;
//  2. each rank copies its own segment (allreduce.Segment) out of the n−1 peers' buffers into
//     device scratch, and one kernel adds the n contributions per element in the ring's order
//     (allreduce.ReduceOrder) with the ring's roundings (allreduce.SumF16: f32 additions, each
//     partial sum rounded to f16 as the ring puts it on the wire), writes the sum into the owned
//     range of its own buffer and widens it into the gradient slab's owned range (ReduceRange, on
//     the plan's return stream: Finish orders it before the optimizer, as ReturnRange's).
//
// The sum is the host ring's bit for bit (TestSumF16_isTheRingsReduceScatterF16 in allreduce;
// TestShardStaged_peerReduceBitIdentical here), so the run's weights are the unsharded run's. A
// rank's own segment of its buffer is read by no peer (each copies its own segment), so the sum
// may land there while peers still copy theirs.
//
// A peer's buffer for bucket b is overwritten by its next cast of b (the next syncing step's
// backward). Every rank's copies of step N must be done by then: Wait, after every bucket's
// ReduceRange was enqueued and Finish made the compute stream wait for the return stream, waits
// for the device (Sync: the copies are done) and then meets the ranks once (peerReduceMeet); a
// rank casts step N+1's buckets only after its own Wait of step N has returned, so after every
// rank's copies of step N. The engine meets itself rather than lean on a later collective of the
// trainer (ddp.shard_gather: device's meeting follows a device wait too, but a skipped step has
// no gather): it costs the device the host's round trip at the end of backward, a step's
// optimizer later reading the gradients waits for the device anyway. Likewise a rank's buffers
// must outlive its peers' last copies: the last Wait's meeting comes after every rank's copies.

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// peerReduce is the engine's state under UsePeerReduce, and under UsePeerCopies (engine_peer.go).
type peerReduce struct {
	stg   tensor.PeerShardStaging
	m     tensor.PeerMirror // the peers' staging buffers, mapped
	order []int             // allreduce.ReduceOrder of this rank's segments
	// UsePeerCopies: the all-gather half too (engine_peer.go); nil under UsePeerReduce
	all tensor.PeerGradStaging
}

// PeerReduceRefusal says why UsePeerReduce would refuse this engine (nil: it would try; also nil
// alone, where nothing is reduced). The same on every rank of a run: it reads the configuration
// and the device's kind only.
func (e *Engine) PeerReduceRefusal() error {
	switch {
	case e.shard == nil:
		if e.comm.Size() < 2 {
			return nil
		}
		return errors.New("ddp.shard_reduce: device needs ddp.shard_optimizer")
	case e.devp != nil:
		return errors.New("ddp.shard_reduce: device with ddp.intra_host: device: that path reduces on the device already")
	case e.gpu == nil || e.gpu.shardStg == nil:
		return errors.New("ddp.shard_reduce: device needs the sharded staged path (--device cuda, precision fp16 with the f16 wire); this run reduces on the host")
	}
	if _, ok := e.gpu.shardStg.(tensor.PeerShardStaging); !ok {
		return fmt.Errorf("ddp.shard_reduce: device: device %s cannot map its peers' staging buffers (a CUDA build can)", e.dev.Name())
	}
	return nil
}

// UsePeerReduce switches the sharded staged path's reduce-scatter of the gradients to copies
// between the devices (the file's comment). It is a collective of the engine's group, like
// UsePeerGather: call it on every rank after New and before the first step, only where every
// rank is on this host. A rank that cannot still takes part in both exchanges, so every rank
// fails alike, naming the rank; a device's failure wraps ErrPeerSetup on every rank.
func (e *Engine) UsePeerReduce(ctx context.Context) error {
	if e.shard == nil && e.comm.Size() < 2 {
		return nil // alone: nothing is reduced
	}
	p, err := e.connectPeerStaging(ctx, e.PeerReduceRefusal(), func() tensor.PeerShardStaging {
		return e.gpu.shardStg.(tensor.PeerShardStaging)
	})
	if err != nil {
		return err
	}
	e.peerRed = p
	e.log.Info("ddp: the sharded step's f16 gradients are reduce-scattered by copies between the devices (ddp.shard_reduce: device)",
		"ranks", e.comm.Size(), "buckets", len(e.buckets))
	return nil
}

// connectPeerStaging is UsePeerReduce's and UsePeerCopies' setup (connectMirror): unless
// refused, this rank exports the staging plan's device buffers (plan's NewPeerReduce) and maps
// its peers'.
func (e *Engine) connectPeerStaging(ctx context.Context, refusal error, plan func() tensor.PeerShardStaging) (*peerReduce, error) {
	var stg tensor.PeerShardStaging
	m, err := e.connectMirror(ctx, refusal, func() (tensor.PeerMirror, error) {
		stg = plan()
		return stg.NewPeerReduce(e.comm.Rank(), e.comm.Size())
	}, "its staging buffers")
	if err != nil {
		return nil, err
	}
	return &peerReduce{stg: stg, m: m, order: allreduce.ReduceOrder(e.comm.Size(), e.comm.Rank())}, nil
}

// PeerReduce reports whether the reduce-scatter runs by copies between the devices: after
// UsePeerReduce, or UsePeerCopies (whose all-reduce begins with it; PeerCopies tells them apart).
func (e *Engine) PeerReduce() bool { return e.peerRed != nil }

// reducePeer is channel ch's comm goroutine's work for bucket b under UsePeerReduce: the wait
// for this rank's cast and the meeting (step 1), then the copies and the sum (step 2); under
// UsePeerCopies also the all-gather half (gatherPeer, engine_peer.go).
func (e *Engine) reducePeer(ch int, b *bucket) error {
	p := e.peerRed
	e.gpu.waitFrom[b.index] = e.now()
	p.stg.WaitStaged(b.index)
	b.start = e.now()
	_, err := e.comms[ch].AllGather(e.ctx, []byte{1})
	if err != nil {
		err = fmt.Errorf("ddp: the ranks' meeting before the %s of gradient bucket %d (%s, device copies): %w", e.collective(), b.index, b.params[0].Name, err)
	} else {
		lo, hi := e.ownedSeg(b)
		p.stg.ReduceRange(b.index, lo, hi, p.order)
		if p.all != nil {
			err = e.gatherPeer(ch, b)
		}
	}
	b.end = e.now()
	return err
}

// peerReduceMeet ends Wait under UsePeerReduce and UsePeerCopies: this rank's copies out of its
// peers' buffers are done (the device's stream waited for them at Finish), then the ranks meet,
// so no rank casts the next step's buckets over a buffer a peer still copies (the file's
// comment; engine_peer.go's).
func (e *Engine) peerReduceMeet(ctx context.Context) error {
	e.dev.Sync()
	if _, err := e.comm.AllGather(ctx, []byte{1}); err != nil {
		return fmt.Errorf("ddp: the ranks' meeting after the %s (device copies): %w", e.collective(), err)
	}
	return nil
}
