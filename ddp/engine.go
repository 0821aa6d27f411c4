package ddp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// Options configure an Engine.
type Options struct {
	// BucketCapMB is the size of a gradient bucket in MiB of f32 gradient (ddp.bucket_cap_mb,
	// default 25): smaller buckets start communicating earlier, larger ones pay less per-call cost.
	BucketCapMB float64
	// Wire is the all-reduce wire format (ddp.wire): f16 under fp16 training by default.
	Wire allreduce.Wire
	// Channels are extra process groups over the same ranks (ddp.channels − 1 of them). Buckets
	// are dealt round-robin over the main group and these, each with its own comm goroutine, so
	// several all-reduces run at once and use more cores (NCCL calls these channels). Results are
	// bit-identical to one channel: each bucket is reduced by the same ring algorithm.
	Channels []Comm
	// Tracer, when set, receives the all-reduce spans and sets the engine's clock (trace.go).
	Tracer Tracer
	Logger *slog.Logger
	// HostStaging keeps gradients on the host path (Download, all-reduce, Upload) even on a
	// device that can stage them as f16 through pinned memory (engine_gpu.go).
	HostStaging bool
	// ShardOptimizer is ddp.shard_optimizer (ZeRO-1, shard.go): buckets are reduce-scattered
	// instead of all-reduced, each rank's optimizer updates only its shard (Shard, PlanShard),
	// and GatherParams all-gathers the updated weights. On the host path, in place on the CPU
	// device (stage 2); on the staged path under fp16 when the device's plan has
	// tensor.ShardStaging (shard_gpu.go).
	ShardOptimizer bool
	// OverlapGather is ddp.overlap_gather: under ShardOptimizer, GatherParams leaves the
	// all-gather of the updated weights in flight and the next forward waits for each bucket as
	// it reads it (gather_overlap.go). The same bits; the device path always waits.
	OverlapGather bool
	// DeviceGrace bounds the device path's wait for a launched all-reduce once every rank has
	// launched it (engine_device.go; 0: DefaultDeviceGrace).
	DeviceGrace time.Duration
}

// Engine averages a model's gradients across the ranks of a Comm. Methods other than those the
// comm goroutine runs are called from the training goroutine only.
type Engine struct {
	ps   *model.Params
	dev  tensor.Device
	comm Comm
	opts Options
	log  *slog.Logger

	buckets      []*bucket
	paramBuckets [][]int // parameter index → its bucket's index (several for a split parameter)

	syncing      bool
	nextSend     int // buckets are handed to the comm goroutine in index order
	staged       []bool
	unusedWarned bool

	gpu  *gpuPath          // the staged path (engine_gpu.go); nil on the host path
	devp *devicePath       // the device path (engine_device.go, UseDevice); nil elsewhere
	peer tensor.PeerMirror // the sharded staged path's weights gathered by copies between the devices (shard_peer.go, UsePeerGather); nil elsewhere
	// the sharded staged path's gradients reduce-scattered by copies between the devices
	// (shard_peer_reduce.go, UsePeerReduce); nil elsewhere
	peerRed *peerReduce
	// stagedNote logs the staged path's Info line (initStaging) at the first micro-step, unless
	// UsePeerCopies or UsePeerReduce took the gradients off pinned memory by then; nil once said.
	stagedNote func()

	shard       *model.Shard // this rank's part under ddp.shard_optimizer (shard.go); nil: unsharded
	masterStale bool         // other ranks' segments of the f32 master are stale (GatherMaster)
	// sharded under mixed precision, per rank, its owned ranges of the master weights forward reads
	// (model.Param.MasterRead), gathered with the 16-bit copy (shard.go); nil: none
	masterRead [][][2]int
	// inPlace (stage 2, shard.go): sharded on a device whose slabs are host memory, buckets are
	// reduce-scattered and all-gathered in the slabs themselves; no bucket has a host buffer.
	inPlace tensor.HostMemory
	scratch [][]float32 // per channel, the largest bucket's length, at first use (shard.go)
	// inflight is the all-gather GatherParams left running under OverlapGather, until settled
	// (gather_overlap.go); gatherErr is a failed one's error, returned by every later settle.
	inflight  *flight
	gatherErr error

	buffers []*tensor.Tensor // compared by CheckReplicas (SetBuffers)

	comms     []Comm         // the main group, then Options.Channels
	jobs      []chan *bucket // one per channel: bucket i goes to channel i mod len(comms)
	results   chan error
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	epoch            time.Time
	bwdStart, bwdEnd int64 // ns since epoch, this step's (last micro-step's) backward
	bwdMu            sync.Mutex
	bwdFence         tensor.Fence // backward's end on the device, until seen passed (bwdMu)
	commNanos        int64        // total all-reduce time, all steps
	hiddenNanos      int64        // part of it overlapped with backward
	steps            int
}

// New plans the buckets over ps and starts the comm goroutine. Close stops it.
func New(ps *model.Params, comm Comm, opts Options) *Engine {
	if opts.BucketCapMB <= 0 {
		opts.BucketCapMB = 25
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Engine{ps: ps, dev: ps.Device(), comm: comm, opts: opts, log: opts.Logger, epoch: time.Now()}
	e.comms = append([]Comm{comm}, opts.Channels...)
	if opts.ShardOptimizer && comm.Size() > 1 {
		e.shard = PlanShard(ps, opts.BucketCapMB, comm.Size(), comm.Rank())
		if ps.Half != nil {
			e.masterRead = masterReadPieces(ps, opts.BucketCapMB, comm.Size())
		}
		if hm, ok := e.dev.(tensor.HostMemory); ok {
			e.inPlace = hm // stage 2: no host copy of the gradients (shard.go)
		}
	}
	e.scratch = make([][]float32, len(e.comms))
	e.paramBuckets = make([][]int, len(ps.List))
	for _, sp := range bucketPlan(ps, opts.BucketCapMB) {
		b := &bucket{index: len(e.buckets), lo: sp.lo, hi: sp.hi, params: ps.List[sp.first : sp.last+1]}
		if e.inPlace == nil {
			b.host = make([]float32, b.hi-b.lo)
		}
		b.view = ps.Grad.View(b.lo, b.hi-b.lo)
		for i := sp.first; i <= sp.last; i++ {
			e.paramBuckets[i] = append(e.paramBuckets[i], b.index)
		}
		e.buckets = append(e.buckets, b)
	}
	e.staged = make([]bool, len(e.buckets))
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if comm.Size() > 1 {
		e.initStaging()
		if e.gpu != nil {
			e.inPlace = nil // the staged path holds the gradients' copies (pinned); none on the host
		}
		e.results = make(chan error, len(e.buckets))
		for ch, c := range e.comms {
			jobs := make(chan *bucket, len(e.buckets))
			e.jobs = append(e.jobs, jobs)
			e.wg.Add(1)
			go e.commLoop(ch, c, jobs)
		}
		ps.OnGradReady = e.onReady
		if e.shard != nil && opts.OverlapGather {
			ps.OnRead = e.onRead
		}
	}
	return e
}

// Buckets describes the plan: for each bucket its parameter names and bytes (logs, tests).
func (e *Engine) Buckets() []string {
	out := make([]string, len(e.buckets))
	for i, b := range e.buckets {
		out[i] = fmt.Sprintf("bucket %d: %d params, %s (%s … %s)", i, len(b.params),
			tensor.FormatBytes(int64(b.hi-b.lo)*4), b.params[0].Name, b.params[len(b.params)-1].Name)
		if p := b.params[0]; len(b.params) == 1 && b.hi-b.lo < p.Len() {
			out[i] += fmt.Sprintf(" elements [%d, %d) of %d", b.lo-p.Offset, b.hi-p.Offset, p.Len())
		}
	}
	return out
}

// now is the engine's clock in ns: the tracer's when there is one (its spans line up with the
// caller's), else time since New.
func (e *Engine) now() int64 {
	if e.opts.Tracer != nil {
		return e.opts.Tracer.Now()
	}
	return int64(time.Since(e.epoch))
}

// Close stops the comm goroutine. It does not close the Comm.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.cancel()
		e.settle() // a gather in flight stops with the engine's context; its error is moot
		for _, jobs := range e.jobs {
			close(jobs)
		}
		if e.devp != nil {
			e.devp.stop() // before waiting for the comm goroutines: none waits on a dead peer's kernel
		}
		e.wg.Wait()
		if e.devp != nil {
			e.closeDevice()
		}
		if e.peer != nil {
			e.peer.Close() // this rank's copies done; its peers' last copies of its weights are theirs to wait for (shard_peer.go)
		}
		if e.peerRed != nil {
			e.peerRed.m.Close() // before the plan's buffers go: its copies from the peers are done (shard_peer_reduce.go)
		}
		if e.gpu != nil {
			e.gpu.stg.Close()
		}
	})
	e.ps.OnGradReady = nil
	e.ps.OnRead = nil
}

// commLoop is channel ch's comm goroutine: it all-reduces the channel's buckets over comm in the
// order they arrive (index order, so every rank issues the same collectives in the same order).
func (e *Engine) commLoop(ch int, comm Comm, jobs <-chan *bucket) {
	defer e.wg.Done()
	for b := range jobs {
		if e.devp != nil {
			err := e.reduceDevice(ch, b)
			e.pollBackward(false)
			e.results <- err
			continue
		}
		if e.peerRed != nil {
			e.results <- e.reducePeer(ch, b)
			e.pollBackward(false)
			continue
		}
		if e.gpu != nil {
			e.results <- e.reduceStaged(ch, b)
			e.pollBackward(false)
			continue
		}
		b.start = e.now()
		var err error
		if e.shard != nil {
			err = comm.ReduceScatter(e.ctx, e.gradBuf(b), allreduce.Avg, e.opts.Wire)
		} else {
			err = comm.AllReduce(e.ctx, b.host, allreduce.Avg, e.opts.Wire)
		}
		b.end = e.now()
		e.pollBackward(false)
		if err != nil {
			err = fmt.Errorf("ddp: %s of gradient bucket %d (%s): %w", e.collective(), b.index, b.params[0].Name, err)
		}
		e.results <- err
	}
}

// BeginMicro starts micro-step micro of accum: only the last one communicates. Call it before
// the micro-step's backward.
func (e *Engine) BeginMicro(micro, accum int) {
	if e.stagedNote != nil {
		if e.peerRed == nil {
			e.stagedNote()
		}
		e.stagedNote = nil
	}
	e.syncing = e.comm.Size() > 1 && micro == accum-1
	if e.syncing {
		// The buckets' buffers and the groups are the gradients' now: the weights' all-gather
		// must be over (forward has normally waited for all of it). Wait returns its error.
		e.settle()
		for i := range e.staged {
			e.staged[i] = false
		}
		for _, b := range e.buckets {
			b.pending = len(b.params)
		}
		e.nextSend = 0
	}
}

// BeginBackward and EndBackward bracket the model's backward, for overlap accounting: the
// backward has ended when EndBackward is called (a synchronous device, or after a Sync).
func (e *Engine) BeginBackward() { e.bwdStart = e.now() }
func (e *Engine) EndBackward()   { e.EndBackwardAt(nil) }

// EndBackwardAt is EndBackward on an asynchronous device whose backward is only enqueued: f is
// a fence after it (nil: ended now). The trainer need not wait: the comm goroutines poll f after
// each bucket and Wait waits for it, so backward's end is known to about a bucket's time.
func (e *Engine) EndBackwardAt(f tensor.Fence) {
	e.bwdMu.Lock()
	defer e.bwdMu.Unlock()
	e.bwdEnd, e.bwdFence = e.now(), nil
	if f != nil && !f.Done() {
		e.bwdFence = f
	}
}

// pollBackward notes backward's end once its fence has passed; wait: block for it.
func (e *Engine) pollBackward(wait bool) {
	e.bwdMu.Lock()
	defer e.bwdMu.Unlock()
	if e.bwdFence == nil {
		return
	}
	if wait {
		e.bwdFence.Wait()
	} else if !e.bwdFence.Done() {
		return
	}
	e.bwdEnd, e.bwdFence = e.now(), nil
}

// onReady is the parameters' grad-ready hook.
func (e *Engine) onReady(p *model.Param) {
	if !e.syncing {
		return
	}
	for _, bi := range e.paramBuckets[p.Index] {
		b := e.buckets[bi]
		b.pending--
		if b.pending == 0 {
			e.stage(b)
		}
	}
}

// stage copies a complete bucket to its host buffer and hands every bucket that is staged and
// next in order to the comm goroutine.
func (e *Engine) stage(b *bucket) {
	if e.staged[b.index] {
		return
	}
	if e.devp != nil {
		e.dev.Copy(e.devp.bufs[b.index], b.view) // launched below, in index order
	} else if e.peerRed != nil { // the cast only: the peers copy from the device (shard_peer_reduce.go, engine_peer.go)
		e.peerRed.stg.StageDevice(b.index, e.gpu.scale)
	} else if e.gpu != nil {
		e.gpu.stg.Stage(b.index, e.gpu.scale)
	} else if e.inPlace == nil { // in place (shard.go): the comm goroutine reads the slab itself
		e.dev.Download(b.host, b.view)
	}
	e.staged[b.index] = true
	for e.nextSend < len(e.buckets) && e.staged[e.nextSend] {
		if e.devp != nil {
			e.launchDevice(e.buckets[e.nextSend])
		}
		e.jobs[e.nextSend%len(e.jobs)] <- e.buckets[e.nextSend]
		e.nextSend++
	}
}

// Wait finishes a syncing micro-step: buckets whose parameters never reported ready (parameters
// unused in this forward) are sent now, then it waits for every all-reduce and writes the
// averaged gradients back into the gradient slab. A no-sync micro-step returns at once.
func (e *Engine) Wait(ctx context.Context) error {
	if !e.syncing {
		return e.settle()
	}
	if err := e.settle(); err != nil {
		return err
	}
	e.syncing = false
	for _, b := range e.buckets {
		if !e.staged[b.index] {
			if !e.unusedWarned {
				e.log.Warn("ddp: some parameters never reported a gradient in backward; their bucket is reduced at the end of the step", "bucket", b.index, "first", b.params[0].Name)
				e.unusedWarned = true
			}
			e.stage(b)
		}
	}
	var first error
	for range e.buckets {
		select {
		case err := <-e.results:
			if err != nil && first == nil {
				first = err
			}
		case <-ctx.Done():
			return fmt.Errorf("ddp: waiting for gradient all-reduce: %w", ctx.Err())
		}
	}
	if first != nil {
		return first
	}
	var comm, hidden int64
	if e.gpu != nil {
		e.gpu.stg.Finish()
	}
	if e.peerRed != nil {
		if err := e.peerReduceMeet(ctx); err != nil {
			return err
		}
	}
	if e.devp != nil {
		if err := e.finishDevice(ctx); err != nil {
			return err
		}
	}
	e.pollBackward(true)
	for _, b := range e.buckets {
		switch {
		case e.gpu != nil: // returned (widened) by the comm goroutines; Finish ordered it
		case e.devp != nil: // copied back by finishDevice, after the side stream (Join)
		case e.shard != nil && e.inPlace != nil: // averaged in the slab already (shard.go)
		case e.shard != nil: // only the owned segment is averaged; the rest is the ring's scratch
			lo, hi := e.ownedSeg(b)
			e.dev.Upload(e.ps.Grad.View(b.lo+lo, hi-lo), b.host[lo:hi])
		default:
			e.dev.Upload(b.view, b.host)
		}
		e.traceStaged(b)
		comm += b.end - b.start
		hidden += overlap(b.start, b.end, e.bwdStart, e.bwdEnd)
		if e.opts.Tracer != nil {
			e.opts.Tracer.Span(e.spanName(b), "comm", b.start, b.end,
				map[string]any{"bytes": (b.hi - b.lo) * 4, "wire": e.opts.Wire.String(), "params": len(b.params)})
		}
	}
	e.commNanos += comm
	e.hiddenNanos += hidden
	e.steps++
	return nil
}

func overlap(a0, a1, b0, b1 int64) int64 {
	lo, hi := max(a0, b0), min(a1, b1)
	if hi > lo {
		return hi - lo
	}
	return 0
}

// CommStats returns the total all-reduce time so far and the share of it that overlapped with
// backward.
func (e *Engine) CommStats() (commSeconds, hiddenFraction float64) {
	if e.commNanos == 0 {
		return 0, 0
	}
	return float64(e.commNanos) / 1e9, float64(e.hiddenNanos) / float64(e.commNanos)
}

// AgreeAny returns true on every rank when flag is true on any rank (the loss scaler's
// found-inf decision, so every replica skips or steps together).
func (e *Engine) AgreeAny(ctx context.Context, flag bool) (bool, error) {
	ranks, err := e.RanksWith(ctx, flag)
	return len(ranks) > 0, err
}

// RanksWith returns, on every rank, the ranks whose flag is true, in rank order (none: nil):
// AgreeAny's agreement with names, for an error that says where an inf or NaN gradient was
// seen (precision bf16 has no scaler to skip the step). A collective, like AgreeAny.
func (e *Engine) RanksWith(ctx context.Context, flag bool) ([]int, error) {
	if err := e.settle(); err != nil {
		return nil, err
	}
	v := make([]float32, e.comm.Size())
	if flag {
		v[e.comm.Rank()] = 1
	}
	if len(v) > 1 {
		if err := e.comm.AllReduce(ctx, v, allreduce.Sum, allreduce.WireF32); err != nil {
			return nil, fmt.Errorf("ddp: agreeing on the overflow check: %w", err)
		}
	}
	var ranks []int
	for r, x := range v {
		if x > 0 {
			ranks = append(ranks, r)
		}
	}
	return ranks, nil
}

// BroadcastParams makes every replica start from rank 0's weights (and refreshes the f16 copy).
func (e *Engine) BroadcastParams(ctx context.Context) error {
	if e.ps.MasterSharded() {
		return fmt.Errorf("ddp: broadcasting the parameters of a sharded f32 master: make it whole first (model.Params.UnshardMaster)")
	}
	return e.BroadcastTensors(ctx, []*tensor.Tensor{e.ps.Data})
}

// BroadcastTensors copies rank 0's values of f32 device tensors to every rank (parameters,
// optimizer state on resume); the 16-bit copy is refreshed when the parameters are among them.
func (e *Engine) BroadcastTensors(ctx context.Context, ts []*tensor.Tensor) error {
	if err := e.settle(); err != nil {
		return err
	}
	if e.comm.Size() == 1 {
		return nil
	}
	for _, t := range ts {
		host := make([]float32, t.Len())
		e.dev.Download(host, t)
		if err := e.comm.BroadcastF32(ctx, host, 0); err != nil {
			return fmt.Errorf("ddp: broadcasting %s from rank 0: %w", t, err)
		}
		e.dev.Upload(t, host)
		if t == e.ps.Data {
			e.ps.SyncHalf()
		}
	}
	return nil
}

// SetBuffers names the model's buffers (BatchNorm running statistics) that BroadcastTensors
// keeps equal on every rank: CheckReplicas compares them too.
func (e *Engine) SetBuffers(ts []*tensor.Tensor) { e.buffers = ts }

// buffersSHA256 is the sha256 of the buffers' values, "" when there are none.
func (e *Engine) buffersSHA256() string {
	if len(e.buffers) == 0 {
		return ""
	}
	h := sha256.New()
	for _, t := range e.buffers {
		host := make([]float32, t.Len())
		e.dev.Download(host, t)
		b := make([]byte, 4*len(host))
		for i, v := range host {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrReplicaMismatch is wrapped by CheckReplicas' error.
var ErrReplicaMismatch = errors.New("ddp: replicas diverged")

// CheckReplicas compares the sha256 of every rank's parameters, and of its buffers
// (SetBuffers); a mismatch is an error naming the ranks that differ from rank 0, and what
// differs. It returns the parameters' hash.
func (e *Engine) CheckReplicas(ctx context.Context, step int) (string, error) {
	master, err := e.MasterHost(ctx) // gathered into a host buffer when sharded, dropped after
	if err != nil {
		return "", err
	}
	h := model.HashF32(master)
	if e.comm.Size() == 1 {
		return h, nil
	}
	all, err := e.comm.AllGather(ctx, []byte(h+"/"+e.buffersSHA256()))
	if err != nil {
		return h, fmt.Errorf("ddp: replica check at step %d: %w", step, err)
	}
	p0, b0, _ := strings.Cut(string(all[0]), "/")
	var badP, badB []string
	for r, b := range all {
		p, bb, _ := strings.Cut(string(b), "/")
		if p != p0 {
			badP = append(badP, fmt.Sprint(r))
		}
		if bb != b0 {
			badB = append(badB, fmt.Sprint(r))
		}
	}
	if len(badP) > 0 {
		sort.Strings(badP)
		return h, fmt.Errorf("%w at step %d: parameters of rank(s) %s differ from rank 0's (%s…)",
			ErrReplicaMismatch, step, strings.Join(badP, ", "), p0[:12])
	}
	if len(badB) > 0 {
		sort.Strings(badB)
		return h, fmt.Errorf("%w at step %d: buffers (BatchNorm running statistics) of rank(s) %s differ from rank 0's (%.12s…)",
			ErrReplicaMismatch, step, strings.Join(badB, ", "), b0)
	}
	return h, nil
}
