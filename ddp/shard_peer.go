package ddp

// shard_peer.go: ddp.shard_gather: device — the sharded staged path's all-gather of the f16
// weights (shard_gpu.go, step 3) as copies between the devices of one host (issue 31's W = 2 step;
// issue 34's device path without a kernel that waits on another process).
//
// On the staged path each rank's optimizer writes its owned segment of every bucket of the f16
// compute copy; stagedHalfGather then copies those segments out to pinned memory, all-gathers them
// on the host ring and copies whole buckets back: for GPT-2 small at W = 2, 125 MB each way
// through the host per rank and step, longer than the forward it hides behind (docs/perf-memory.md:
// the sharded step 1.16–1.20× the unsharded one). Here every rank maps its peers' f16 copies once
// (tensor.PeerMirror, CUDA IPC), and a step's gather is:
//
//  1. this rank waits for its own optimizer step (the device's stream), then the ranks meet once
//     over the group (an all-gather of one byte): every rank's owned segments are written;
//  2. each bucket, as forward reaches it (ddp.overlap_gather) or all at once, gets the peers'
//     owned segments copied into this rank's f16 copy on the compute stream (PeerMirror.Pull: the
//     copy engines, device to device).
//
// The copies carry the peers' values bit for bit: the same weights as the host all-gather's
// (TestShardStaged_peerGatherBitIdentical). A peer must not write a segment while another rank
// still copies it: its next write is its next optimizer step, which comes after the next
// reduce-scatter, which needs this rank's next backward, which its stream runs after these copies
// (a bucket forward never read lands only at the settle before this rank's next collective: the
// gather's finish waits for the device before this rank joins it). And a rank's f16 copy must outlive its peers' last copies of it: the trainer ends with the
// replica check, a collective each rank joins after a device wait. The meeting costs the GPU the
// time between the optimizer's end and the first copy (a host round trip); the copies themselves
// run at the device's copy rate (~125 MB in well under a millisecond on one GPU). Measured on an
// H100 shared by the workers (session 20, docs/perf-memory.md): GPT-2 small's sharded step 0.94×
// the unsharded one at W = 2 and 0.87× at W = 4, the same param_sha256.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// ErrPeerSetup marks UsePeerGather's failures of the devices themselves (a rank's device could not
// export its f16 copy or map a peer's), which every rank learns of alike: `ddp.shard_gather: auto`
// then keeps the host ring; a refusal of the configuration or a failed collective is not one.
var ErrPeerSetup = errors.New("the devices could not map each other's f16 weights")

// PeerGatherRefusal says why UsePeerGather would refuse this engine (nil: it would try; also nil
// alone, where nothing is gathered). The same on every rank of a run: it reads the configuration
// and the device's kind only.
func (e *Engine) PeerGatherRefusal() error {
	_, ok := e.dev.(tensor.PeerMirrorDevice)
	switch {
	case e.shard == nil:
		if e.comm.Size() < 2 {
			return nil
		}
		return errors.New("ddp.shard_gather: device needs ddp.shard_optimizer")
	case e.devp != nil:
		return errors.New("ddp.shard_gather: device with ddp.intra_host: device: that path gathers on the device already")
	case e.gpu == nil || e.gpu.shardStg == nil:
		return errors.New("ddp.shard_gather: device needs the sharded staged path (--device cuda, precision fp16 with the f16 wire); this run gathers on the host")
	case !ok:
		return fmt.Errorf("ddp.shard_gather: device: device %s cannot map its peers' memory (a CUDA build can)", e.dev.Name())
	}
	return nil
}

// UsePeerGather switches the sharded staged path's gather of the f16 weights to copies between
// the devices (the file's comment). It is a collective of the engine's group: call it on every
// rank after New and before the first step, only where every rank is on this host and the device
// can map its peers' memory (tensor.PeerMirrorDevice: a CUDA build). A rank that cannot still
// takes part in both exchanges (the handles, then whether each rank mapped its peers), so every
// rank fails alike, naming the rank; a device's failure wraps ErrPeerSetup on every rank.
func (e *Engine) UsePeerGather(ctx context.Context) error {
	if e.shard == nil && e.comm.Size() < 2 {
		return nil // alone: nothing is gathered
	}
	m, err := e.connectMirror(ctx, e.PeerGatherRefusal(), func() (tensor.PeerMirror, error) {
		return e.dev.(tensor.PeerMirrorDevice).NewPeerMirror(e.ps.Half, e.comm.Rank(), e.comm.Size())
	}, "its weights")
	if err != nil {
		return err
	}
	e.peer = m
	e.log.Info("ddp: the sharded step's f16 weights are copied between the devices (ddp.shard_gather: device)",
		"ranks", e.comm.Size(), "buckets", len(e.buckets))
	return nil
}

// connectMirror is UsePeerGather's and UsePeerReduce's setup, a collective of the engine's group:
// unless refused (this rank's configuration says no), this rank makes its mirror (newMirror), the
// ranks exchange their handles, each connects to its peers', and the ranks exchange whether each
// did — so a rank that fails at any point still takes part in both exchanges and every rank fails
// alike, naming it ("rank r could not share|map its peers' …", what names the tensors). A device's
// failure (newMirror's or Connect's, on any rank) wraps ErrPeerSetup on every rank; a refusal or a
// failed collective does not.
func (e *Engine) connectMirror(ctx context.Context, refusal error, newMirror func() (tensor.PeerMirror, error), what string) (tensor.PeerMirror, error) {
	mine := refusal
	var m tensor.PeerMirror
	var device error // this rank's device failed (not its configuration)
	if mine == nil {
		m, device = newMirror()
		mine = device
	}
	var handle []byte
	if mine == nil {
		handle = m.Handle()
	}
	all, err := exchangeHandles(ctx, e.comm, handle, mine, "share "+what)
	if err == nil {
		// Connect may fail on one rank alone (a handle its driver will not open): every rank
		// learns of it before any step copies from a peer that went back to the host path.
		device = m.Connect(all)
		_, err = exchangeHandles(ctx, e.comm, nil, device, "map its peers' "+strings.TrimPrefix(what, "its "))
	}
	if err != nil {
		if m != nil {
			m.Close()
		}
		var peer rankCouldNot
		if (device != nil && errors.Is(err, device)) || (mine == nil && errors.As(err, &peer)) {
			return nil, fmt.Errorf("ddp: rank %d: %w: %w", e.comm.Rank(), ErrPeerSetup, err)
		}
		return nil, fmt.Errorf("ddp: rank %d: %w", e.comm.Rank(), err)
	}
	return m, nil
}

// PeerGather reports whether UsePeerGather switched the gather to the devices.
func (e *Engine) PeerGather() bool { return e.peer != nil }

// peerHalfGather is GatherParams' all-gather with UsePeerGather: the wait and the meeting (steps
// 1), then an op whose land copies each bucket's peer segments (step 2); its channels carry
// nothing.
func (e *Engine) peerHalfGather(ctx context.Context) (string, gatherOp, error) {
	const what = "f16 weights (device copies)"
	e.dev.Sync() // this rank's optimizer step has written its segments
	if _, err := e.comm.AllGather(ctx, []byte{1}); err != nil {
		return what, gatherOp{}, fmt.Errorf("ddp: the ranks' meeting before the %s: %w", what, err)
	}
	n, me := e.comm.Size(), e.comm.Rank()
	return what, gatherOp{
		gather: func(context.Context, int, *bucket) error { return nil },
		land: func(b *bucket) {
			for q := range n {
				if q == me {
					continue
				}
				lo, hi := allreduce.Segment(b.hi-b.lo, n, q)
				e.peer.Pull(q, b.lo+lo, b.lo+hi)
			}
		},
		// A bucket forward never read lands at the settle before this rank's next collective;
		// the peers may write their segments right after that collective, so the copies must be
		// done by then (the device's stream: at that point it has run the step's backward already).
		finish: e.dev.Sync,
	}, nil
}
