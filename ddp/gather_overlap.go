package ddp

// gather_overlap.go: the sharded step's all-gathers, and the one after the optimizer step
// overlapped with the next forward (ddp.overlap_gather, Options.OverlapGather; PyTorch FSDP's
// forward prefetch). A gatherOp all-gathers every bucket: each channel's goroutine takes its
// buckets in the order forward reads them — the highest index first, since buckets are built in
// reverse registration order — and marks each arrived; a bucket's landing (on a device, its copy
// back, enqueued on the compute stream) runs on the training goroutine.
//
// Without overlap, GatherParams waits for every bucket (finishGather) before it returns, as
// GatherMaster, GatherState and the checkpoints' gathers always do. With it, GatherParams
// leaves the gather in flight and returns: the parameters' read hook (model.Params.OnRead,
// onRead) holds each layer until its buckets have arrived and lands them, so the first layers
// compute while the last buckets are still on the wire. Every other use of the groups (the
// overflow agreement, clipping, broadcasts, the replica check, checkpoints, BeginMicro before a
// syncing backward, the trainer's evaluation through Settle) settles the flight first: the
// channels' groups carry one collective at a time, in the same order on every rank. The values
// gathered are the same bits either way; only when they land changes.
//
// An all-gather that fails in flight cannot stop the layer that waits for it (the hook returns
// no error): its bucket is marked arrived without landing, and the error is returned by the next
// settle — and by every one after it (gatherErr), so the step that read stale weights never
// commits.

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/goddp/model"
)

// gatherOp is one all-gather over every bucket. gather runs on channel ch's goroutine and
// touches memory only; land, when not nil, runs on the training goroutine once bucket b's gather
// returned (the device copy back).
type gatherOp struct {
	gather func(ctx context.Context, ch int, b *bucket) error
	land   func(b *bucket)
	// finish, when not nil, runs on the training goroutine once every bucket has landed, before
	// the engine uses a group again (shard_peer.go: its copies read the peers' memory, and must be
	// done before this rank lets a peer on to its next optimizer step).
	finish func()
}

// flight is a gatherOp under way.
type flight struct {
	op      gatherOp
	arrived []chan struct{} // per bucket: closed once its gather returned, failed or not
	failed  []bool          // per bucket, written before arrived is closed: its gather failed
	landed  []bool          // per bucket: awaited (and landed) on the training goroutine
	errs    []error         // per channel, its first error; read after wg.Wait
	wg      sync.WaitGroup
	cancel  func()
}

// startGather starts op on every channel, each taking its buckets (index ≡ ch mod channels)
// from the highest index down, and returns at once. A channel whose gather fails marks its
// remaining buckets failed and arrived. The flight stops when ctx is done or the engine closes.
func (e *Engine) startGather(ctx context.Context, what string, op gatherOp) *flight {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.ctx, cancel)
	n, nch := len(e.buckets), len(e.comms)
	f := &flight{op: op, arrived: make([]chan struct{}, n), failed: make([]bool, n), landed: make([]bool, n),
		errs: make([]error, nch), cancel: func() { stop(); cancel() }}
	for i := range f.arrived {
		f.arrived[i] = make(chan struct{})
	}
	for ch := 0; ch < nch && ch < n; ch++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for i := ch + (n-1-ch)/nch*nch; i >= 0; i -= nch {
				b := e.buckets[i]
				if f.errs[ch] == nil {
					if err := op.gather(ctx, ch, b); err != nil {
						f.errs[ch] = fmt.Errorf("ddp: all-gather of the %s of bucket %d (%s): %w", what, b.index, b.params[0].Name, err)
					}
				}
				f.failed[i] = f.errs[ch] != nil
				close(f.arrived[i])
			}
		}()
	}
	return f
}

// await blocks until bucket i has arrived and lands it, once. Training goroutine.
func (f *flight) await(b *bucket) {
	if f.landed[b.index] {
		return
	}
	<-f.arrived[b.index]
	if f.op.land != nil && !f.failed[b.index] {
		f.op.land(b)
	}
	f.landed[b.index] = true
}

// finishGather waits for every channel, lands the buckets not yet landed (in forward order)
// and returns the first channel's error.
func (e *Engine) finishGather(f *flight) error {
	f.wg.Wait()
	f.cancel()
	for i := len(e.buckets) - 1; i >= 0; i-- {
		f.await(e.buckets[i])
	}
	if f.op.finish != nil {
		f.op.finish()
	}
	for _, err := range f.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// runGather is op started and finished: a gather that returns once every bucket has landed.
func (e *Engine) runGather(ctx context.Context, what string, op gatherOp) error {
	return e.finishGather(e.startGather(ctx, what, op))
}

// settle finishes the gather GatherParams left in flight (nothing when there is none). A failed
// gather's error is kept: this and every later settle return it.
func (e *Engine) settle() error {
	if f := e.inflight; f != nil {
		e.inflight = nil
		if err := e.finishGather(f); err != nil && e.gatherErr == nil {
			e.gatherErr = err
		}
	}
	return e.gatherErr
}

// Settle finishes the all-gather of the weights that GatherParams left in flight under
// ddp.overlap_gather (forward waits for each bucket by itself): call it before using one of the
// engine's process groups directly (the evaluation's all-reduce). The engine's own methods do.
// Otherwise, and unsharded, it returns nil at once.
func (e *Engine) Settle() error { return e.settle() }

// onRead is the parameters' read hook (model.Params.OnRead) while a gather is in flight: it
// waits for p's buckets and lands them. Under mixed precision the f32 masters forward reads
// (master: the norms' gains and biases) were gathered before the flight started
// (gatherMasterRead); the flight carries the 16-bit copy.
func (e *Engine) onRead(p *model.Param, master bool) {
	f := e.inflight
	if f == nil || (master && e.ps.Half != nil) {
		return
	}
	for _, bi := range e.paramBuckets[p.Index] {
		f.await(e.buckets[bi])
	}
}
