package ddp

// shard.go: optimizer-state sharding (ddp.shard_optimizer, ZeRO-1; llm.c's zero.cuh, PyTorch's
// ZeroRedundancyOptimizer). Each rank owns its ring segment of every gradient bucket — exactly
// the part the reduce-scatter leaves averaged on it — and its optimizer keeps state for, and
// updates, only those elements. One step:
//
//  1. Backward hands buckets to the comm goroutines as without sharding, which reduce-scatter
//     them (the all-reduce's first half: same ring, same order, same wire, so the owner's
//     averaged values are the very bits the all-reduce would leave, the f16/bf16 rounding of the
//     full sum included). Wait writes back the owned segments only.
//  2. The scaler checks and unscales the shard (model.Scaler.UnscaleCheckShard); RanksWith agrees
//     on the result as without sharding. ClipGradNorm takes the global norm from the shards'
//     float64 sums of squares, gathered and added in rank order.
//  3. The optimizer (model.NewAdamWShard or model.NewSGDShard on Shard()) steps the shard's
//     master weights; its state (m and v, or SGD's momentum) holds the shard's elements only.
//  4. GatherParams all-gathers what the next forward reads: under fp16 (bf16) the 16-bit
//     compute copy that AdamW wrote beside the shard's master weights, on the f16 (bf16) wire,
//     which carries those values exactly — the bytes of the all-reduce's second half, so the
//     sharded step moves no more than the all-reduce; under fp32 the f32 master weights. Under
//     mixed precision it also all-gathers, f32, the few master weights forward reads itself
//     (model.Param.MasterRead: LayerNorm's and BatchNorm's gains and biases; 150 KiB for GPT-2
//     small). The other ranks' segments of the rest of the f32 master are then stale here;
//     GatherMaster all-gathers them (f32) where the whole master is read: CheckReplicas
//     (param_sha256) and checkpoints.
//
// Accumulation micro-steps send nothing, as without sharding. The saving is the optimizer
// state: m and v hold about N/W elements per rank instead of N.
//
// The f32 master sharded too (ddp.shard_master; DeepSpeed ZeRO-1 partitions it with the optimizer
// state). Under mixed precision nothing reads the other ranks' segments of the f32 master during
// training: forward reads the 16-bit copy (gathered in 4) and the MasterRead masters (gathered in
// 4 as well), and the optimizer updates its own shard. So each rank may keep the f32 master of its
// shard and of the MasterRead parameters only (model.Params.ShardMaster: one packed slab, the
// whole one freed, 4·N·(1−1/W) bytes less per rank): the optimizer steps it through
// Params.MasterView, gatherMasterRead reads and writes it there, GatherMaster has nothing to
// refresh, and MasterHost all-gathers the owned segments (f32: exact) into a host buffer where the
// whole master is read — CheckReplicas' hash and a checkpoint's weights — dropped after. The same
// update on the same values: the same bits (TestShard_bitIdenticalToUnsharded's shard_master
// cases). Not under fp32, where forward reads the master as the weights. BroadcastParams refuses a
// sharded master; the trainer loads a resume or init_from on a whole master
// (Params.UnshardMaster) and shards it again before the first step. On by default on the CPU
// device, and on --device cuda under fp16 (the whole -tags cuda suite ran with it on an H100,
// session 17; bf16 there only when chosen).
//
// Stage 2 (ZeRO-2, the gradients) falls out on a device whose slabs are host memory
// (tensor.HostMemory: the CPU device): each rank keeps only its shard's averaged gradient.
// The comm goroutine reduce-scatters each bucket in the gradient slab itself, once backward has
// finished writing it, so the owned segments end holding the averaged values in place (the same
// ring, order and wire: the same bits) and the non-owned segments hold the ring's partial sums,
// which nothing reads (the scaler's check, clipping and the step read the shard only) and the
// next step's ZeroGrad clears. Freed: the buckets' f32 host copies, 4·N bytes per rank, which
// stage 1 held as the ring's buffers and as a second copy of the averaged segment. Not freed:
// the gradient slab that backward writes into (N f32, whole on every rank: backward produces
// every element), nor the 16-bit copy (the master: ddp.shard_master above). The all-gathers work in place too
// (the f32 master, a checkpoint's state); the 16-bit copy is decoded into one scratch buffer of
// the largest bucket per channel, gathered on its 16-bit wire and encoded back (exact).
// HostBufferBytes says what is held; the memory report shows it with the gradient shard.
//
// It is always on with ddp.shard_optimizer, not a key of its own: it changes no bit, no wire
// byte and no collective, only where the ring's buffer lives, so there is nothing to trade and
// nothing for a user to choose (a ddp.zero_stage: 1 would only keep 4·N bytes held for nothing).
// The one observable difference is the non-owned gradient segments after Wait: partial sums
// instead of this rank's local gradient, which no sharded step reads. On a device without
// HostMemory (the CUDA device's host path) the buckets keep their host copies as in stage 1:
// there the device's gradient slab is the backward buffer and the host copies are the ring's.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// bucketSpec is one bucket of the plan: its slab range and its parameters [first, last].
type bucketSpec struct {
	lo, hi      int
	first, last int
}

// bucketPlan is the engine's bucket layout over ps for a cap of capMB MiB (default 25): a pure
// function of the parameter sizes, so every rank (and PlanShard) sees the same buckets.
func bucketPlan(ps *model.Params, capMB float64) []bucketSpec {
	if capMB <= 0 {
		capMB = 25
	}
	sizes := make([]int, len(ps.List))
	for i, p := range ps.List {
		sizes[i] = p.Len()
	}
	capBytes := int(capMB * (1 << 20))
	var out []bucketSpec
	for _, r := range planBuckets(sizes, capBytes) {
		first, last := ps.List[r[0]], ps.List[r[1]]
		pieces := [][2]int{{first.Offset, last.Offset + last.Len()}}
		if r[0] == r[1] {
			pieces = splitRange(pieces[0][0], pieces[0][1], max(1, capBytes/4))
		}
		for _, pc := range pieces {
			out = append(out, bucketSpec{lo: pc[0], hi: pc[1], first: r[0], last: r[1]})
		}
	}
	return out
}

// PlanShard is the part of ps's slab that rank owns in a world of size under
// ddp.shard_optimizer with buckets of bucketCapMB: its segment (allreduce.Segment) of every
// bucket, in slab order. nil for a world of one (nothing to shard). The optimizer is built on it
// before the engine exists (model.NewAdamWShard); the engine plans the same.
func PlanShard(ps *model.Params, bucketCapMB float64, size, rank int) *model.Shard {
	if size <= 1 {
		return nil
	}
	var sh model.Shard
	for _, b := range bucketPlan(ps, bucketCapMB) {
		lo, hi := allreduce.Segment(b.hi-b.lo, size, rank)
		sh.Ranges = append(sh.Ranges, [2]int{b.lo + lo, b.lo + hi})
	}
	sort.Slice(sh.Ranges, func(i, j int) bool { return sh.Ranges[i][0] < sh.Ranges[j][0] })
	return &sh
}

// Shard is this rank's part of the slab under ddp.shard_optimizer; nil when unsharded (or a
// world of one).
func (e *Engine) Shard() *model.Shard { return e.shard }

// ownedSeg is this rank's segment of bucket b, relative to b.lo.
func (e *Engine) ownedSeg(b *bucket) (lo, hi int) {
	return allreduce.Segment(b.hi-b.lo, e.comm.Size(), e.comm.Rank())
}

// spanName is a bucket's comm span in the trace: "allreduce bucket 3", or sharded
// "reduce-scatter bucket 3".
func (e *Engine) spanName(b *bucket) string {
	if e.shard != nil {
		return fmt.Sprintf("reduce-scatter bucket %d", b.index)
	}
	return fmt.Sprintf("allreduce bucket %d", b.index)
}

func (e *Engine) collective() string {
	if e.shard != nil {
		return "reduce-scatter"
	}
	return "all-reduce"
}

// ClipGradNorm scales the averaged gradients so that their global L2 norm is at most max
// (max ≤ 0 only measures) and returns the norm before clipping, as model.ClipGradNorm. Sharded,
// each rank sums the squares of its shard in float64, the sums are all-gathered and added in
// rank order, and the total is rounded to float32 as model.ClipGradNorm rounds its own: only
// the order of float64 additions differs from the unsharded norm (a relative 1e-16 or so, far
// below float32's 6e-8), so the two agree unless the sum lies that close to a float32 rounding
// boundary. A collective when sharded.
func (e *Engine) ClipGradNorm(ctx context.Context, maxNorm float32) (float32, error) {
	if e.shard == nil {
		return model.ClipGradNorm(e.ps, maxNorm), nil
	}
	norm, coef, err := e.GradNormCoef(ctx, maxNorm)
	if err != nil || coef == 0 {
		return norm, err
	}
	for _, g := range e.shard.Views(e.ps.Grad) {
		e.dev.Scale(g, coef)
	}
	return norm, nil
}

// GradNormCoef is ClipGradNorm without the scaling: the global norm (sharded: over every rank's
// shard) and the factor clipping multiplies the gradients by (model.ClipCoef; 0: none), for an
// optimizer that applies it inside its step (model.GradScaledStepper).
func (e *Engine) GradNormCoef(ctx context.Context, maxNorm float32) (norm, coef float32, err error) {
	if e.shard == nil {
		norm, coef = model.GradNormCoef(e.ps, maxNorm)
		return norm, coef, nil
	}
	if err := e.settle(); err != nil {
		return 0, 0, err
	}
	local := e.shardSumSquares()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], math.Float64bits(local))
	all, err := e.comm.AllGather(ctx, buf[:])
	if err != nil {
		return 0, 0, fmt.Errorf("ddp: gathering the shards' gradient norms: %w", err)
	}
	var total float64
	for _, b := range all {
		total += math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	norm = float32(math.Sqrt(float64(float32(total))))
	return norm, model.ClipCoef(norm, maxNorm), nil
}

// shardSumSquares is Σ v² over this rank's owned segments of the averaged gradients, in
// float64: on a device that sums squares itself (tensor.SquareSummer: the GPU) without a copy to
// the host — on the H200 that copy and the host loop over it were ~130 ms of GPT-2 small's sharded
// step at W = 2 — else on the host, in the buckets' order.
func (e *Engine) shardSumSquares() float64 {
	if ss, ok := e.dev.(tensor.SquareSummer); ok && e.inPlace == nil {
		return ss.SumSquaresF64(e.shard.Views(e.ps.Grad))
	}
	var local float64
	for _, b := range e.buckets {
		lo, hi := e.ownedSeg(b)
		if hi == lo {
			continue
		}
		var seg []float32
		if e.inPlace != nil {
			seg = e.inPlace.HostF32(e.ps.Grad.View(b.lo+lo, hi-lo))
		} else {
			if b.host != nil {
				seg = b.host[lo:hi] // free between steps
			} else { // the staged path holds no host copy
				seg = make([]float32, hi-lo)
			}
			e.dev.Download(seg, e.ps.Grad.View(b.lo+lo, hi-lo))
		}
		for _, v := range seg {
			local += float64(v) * float64(v)
		}
	}
	return local
}

// GatherParams all-gathers the weights the next forward reads after a sharded optimizer step:
// the 16-bit compute copy under mixed precision (on its own 16-bit wire: exact), the f32 master
// weights under fp32. Under mixed precision the f32 masters forward reads (gatherMasterRead) come
// first. With Options.OverlapGather the all-gather is left in flight and forward waits for each
// bucket as it reads it (gather_overlap.go); otherwise GatherParams returns once every bucket has
// landed. The device path (ddp.intra_host: device) always waits. Unsharded it does nothing. A
// collective.
func (e *Engine) GatherParams(ctx context.Context) error {
	if e.shard == nil {
		return nil
	}
	if err := e.settle(); err != nil {
		return err
	}
	if err := e.gatherMasterRead(ctx); err != nil {
		return err
	}
	if e.devp != nil { // on the device, over CUDA IPC (engine_device.go)
		return e.gatherParamsDevice(ctx)
	}
	var what string
	var op gatherOp
	switch {
	case e.ps.Half == nil:
		what, op = "master weights", e.slabGather(e.ps.Data, allreduce.WireF32)
	case e.gpu != nil && e.peer != nil: // copied from the peers' devices (shard_peer.go)
		var err error
		if what, op, err = e.peerHalfGather(ctx); err != nil {
			return err
		}
	case e.gpu != nil: // through pinned memory (shard_gpu.go)
		what, op = "f16 weights", e.stagedHalfGather()
	default:
		wire := allreduce.WireF16
		if e.ps.Half.DType() == tensor.BF16 {
			wire = allreduce.WireBF16
		}
		what, op = e.ps.Half.DType().String()+" weights", e.slabGather(e.ps.Half, wire)
	}
	if e.ps.Half != nil && !e.ps.MasterSharded() {
		e.masterStale = true // the other ranks' segments of the f32 master: GatherMaster
	}
	if e.opts.OverlapGather {
		e.inflight = e.startGather(ctx, what, op)
		return nil
	}
	return e.runGather(ctx, what, op)
}

// masterReadPieces is, for each rank of a world of size, the part of its shard that lies in
// parameters forward reads as f32 master weights (model.Param.MasterRead: the norms' gains and
// biases), as ascending slab ranges; nil when no parameter is so read.
func masterReadPieces(ps *model.Params, capMB float64, size int) [][][2]int {
	var reads [][2]int
	for _, p := range ps.List {
		if p.MasterRead {
			reads = append(reads, [2]int{p.Offset, p.Offset + p.Len()})
		}
	}
	if len(reads) == 0 {
		return nil
	}
	out := make([][][2]int, size)
	for r := range out {
		for _, g := range PlanShard(ps, capMB, size, r).Ranges {
			for _, m := range reads {
				if lo, hi := max(g[0], m[0]), min(g[1], m[1]); hi > lo {
					out[r] = append(out[r], [2]int{lo, hi})
				}
			}
		}
	}
	return out
}

// gatherMasterRead all-gathers, as f32, the master weights that forward reads under mixed
// precision (masterReadPieces): the 16-bit gather leaves every other rank's segments of the
// master stale here, and a LayerNorm or BatchNorm would otherwise normalise with the gains of
// the step the run began at on the ranks that do not own them. Each rank sends its pieces'
// values in slab order (Comm.AllGather) and writes every other rank's into place. Small: GPT-2
// small has 38,400 such elements (150 KiB) of 124M. A collective.
func (e *Engine) gatherMasterRead(ctx context.Context) error {
	if e.masterRead == nil {
		return nil
	}
	me := e.comm.Rank()
	mine := e.readPieces(e.masterRead[me])
	buf := make([]byte, 4*len(mine))
	for i, v := range mine {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	all, err := e.comm.AllGather(ctx, buf)
	if err != nil {
		return fmt.Errorf("ddp: all-gather of the f32 master weights forward reads (norm gains and biases): %w", err)
	}
	for r, b := range all {
		if r == me {
			continue
		}
		n := 0
		for _, pc := range e.masterRead[r] {
			n += pc[1] - pc[0]
		}
		if len(b) != 4*n {
			return fmt.Errorf("ddp: rank %d sent %d bytes of f32 master weights forward reads, want %d (%d elements)", r, len(b), 4*n, n)
		}
		k := 0
		for _, pc := range e.masterRead[r] {
			v := make([]float32, pc[1]-pc[0])
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(k+i):]))
			}
			e.dev.Upload(e.ps.MasterView(pc[0], len(v)), v)
			k += len(v)
		}
	}
	return nil
}

// readPieces is the master weights' values in pieces, concatenated.
func (e *Engine) readPieces(pieces [][2]int) []float32 {
	n := 0
	for _, pc := range pieces {
		n += pc[1] - pc[0]
	}
	out := make([]float32, n)
	k := 0
	for _, pc := range pieces {
		e.dev.Download(out[k:k+pc[1]-pc[0]], e.ps.MasterView(pc[0], pc[1]-pc[0]))
		k += pc[1] - pc[0]
	}
	return out
}

// GatherMaster all-gathers the f32 master weights when GatherParams left other ranks' segments
// stale (mixed precision, sharded, the master whole on every rank): before anything reads the
// whole master. Otherwise — and when the master itself is sharded (model.Params.ShardMaster:
// this rank holds no other segment to refresh; MasterHost gathers it) — it does nothing. A
// collective: every rank calls it at the same points.
func (e *Engine) GatherMaster(ctx context.Context) error {
	if err := e.settle(); err != nil {
		return err
	}
	if !e.masterStale {
		return nil
	}
	if err := e.runGather(ctx, "master weights", e.slabGather(e.ps.Data, allreduce.WireF32)); err != nil {
		return err
	}
	e.masterStale = false
	return nil
}

// MasterHost is the whole f32 master's values on the host, on every rank: the slab downloaded
// (after GatherMaster) when the master is whole; when it is sharded (model.Params.ShardMaster),
// each rank's owned segments all-gathered, f32, into a new host buffer, which the caller drops
// after use (the replica check's hash, a checkpoint's weights): the device holds no whole copy.
// The same values either way: a rank's owned segments of the master are the ones its optimizer
// updated, and the f32 wire carries them exactly. A collective when sharded.
func (e *Engine) MasterHost(ctx context.Context) ([]float32, error) {
	if err := e.GatherMaster(ctx); err != nil {
		return nil, err
	}
	if !e.ps.MasterSharded() {
		return tensor.ToHost(e.ps.Data), nil
	}
	if e.shard == nil {
		return nil, fmt.Errorf("ddp: the f32 master is sharded but the engine is not (ddp.shard_master without ddp.shard_optimizer)")
	}
	full := make([]float32, e.ps.N)
	for _, b := range e.buckets {
		if lo, hi := e.ownedSeg(b); hi > lo {
			e.dev.Download(full[b.lo+lo:b.lo+hi], e.ps.MasterView(b.lo+lo, hi-lo))
		}
	}
	err := e.runGather(ctx, "master weights", e.hostGather(allreduce.WireF32, func(_ int, b *bucket) []float32 {
		return full[b.lo:b.hi] // this rank's segment filled in, the rest by the gather
	}, nil))
	if err != nil {
		return nil, err
	}
	return full, nil
}

// slabGather is the all-gather of every bucket's range of slab t (the master weights or their
// 16-bit copy): in place when t is f32 on a HostMemory device; through the channels' scratch
// (decoded from and encoded back to t's 16 bits: the 16-bit wire carries those values exactly)
// when t is 16-bit there; else through the buckets' host buffers, downloaded here and uploaded as
// each bucket lands.
func (e *Engine) slabGather(t *tensor.Tensor, wire allreduce.Wire) gatherOp {
	if hm := e.inPlace; hm != nil {
		if t.DType() == tensor.F32 {
			return e.hostGather(wire, func(_ int, b *bucket) []float32 {
				return hm.HostF32(t.View(b.lo, b.hi-b.lo))
			}, nil)
		}
		f := half.F16
		if t.DType() == tensor.BF16 {
			f = half.BF16
		}
		return e.hostGather(wire, func(ch int, b *bucket) []float32 {
			buf := e.scratchFor(ch)[:b.hi-b.lo]
			lo, hi := e.ownedSeg(b)
			f.Decode(buf[lo:hi], hm.HostHalf(t.View(b.lo+lo, hi-lo)))
			return buf
		}, func(b *bucket, buf []float32) {
			f.Encode(hm.HostHalf(t.View(b.lo, b.hi-b.lo)), buf)
		})
	}
	bufs := make([][]float32, len(e.buckets))
	for _, b := range e.buckets {
		bufs[b.index] = b.host
		if bufs[b.index] == nil { // the staged path holds no host copy: transient, at checks and checkpoints
			bufs[b.index] = make([]float32, b.hi-b.lo)
		}
		e.dev.Download(bufs[b.index], t.View(b.lo, b.hi-b.lo))
	}
	op := e.hostGather(wire, func(_ int, b *bucket) []float32 { return bufs[b.index] }, nil)
	op.land = func(b *bucket) { e.dev.Upload(t.View(b.lo, b.hi-b.lo), bufs[b.index]) }
	return op
}

// hostGather is the all-gather of the owned segments of every bucket in host memory. buf gives
// bucket b's buffer on channel ch with this rank's segment filled in; done, when not nil, takes
// the gathered buffer back. Both run on the channel's goroutine, so they touch memory only,
// never the device.
func (e *Engine) hostGather(wire allreduce.Wire, buf func(ch int, b *bucket) []float32, done func(b *bucket, buf []float32)) gatherOp {
	return gatherOp{gather: func(ctx context.Context, ch int, b *bucket) error {
		v := buf(ch, b)
		if err := e.comms[ch].AllGatherSegments(ctx, v, wire); err != nil {
			return err
		}
		if done != nil {
			done(b, v)
		}
		return nil
	}}
}

// gradBuf is the buffer bucket b's gradients are reduce-scattered in: the slab's own range in
// place (stage 2), else the bucket's host copy.
func (e *Engine) gradBuf(b *bucket) []float32 {
	if e.inPlace != nil {
		return e.inPlace.HostF32(b.view)
	}
	return b.host
}

// scratchFor is channel ch's scratch buffer, as long as the largest bucket, made at first use
// (the 16-bit weights' gather, a checkpoint's gather of the optimizer state) and kept. Only
// ch's goroutine calls it between the gathers' waits.
func (e *Engine) scratchFor(ch int) []float32 {
	if e.scratch[ch] == nil {
		n := 0
		for _, b := range e.buckets {
			n = max(n, b.hi-b.lo)
		}
		e.scratch[ch] = make([]float32, n)
	}
	return e.scratch[ch]
}

// HostBufferBytes is the host memory the engine holds for communication now (the buckets' f32
// copies, the channels' scratch; the staged path's pinned memory is StagingBytes'), and what the
// host path holds unsharded: an f32 copy of the whole slab.
func (e *Engine) HostBufferBytes() (now, unsharded int64) {
	for _, b := range e.buckets {
		now += 4 * int64(len(b.host))
		unsharded += 4 * int64(b.hi-b.lo)
	}
	for _, s := range e.scratch {
		now += 4 * int64(len(s))
	}
	return now, unsharded
}

// GradShardInPlace reports stage 2's in-place mode: sharded on a device whose slabs are host
// memory, the averaged gradients exist only in the slab's owned ranges (no host copy).
func (e *Engine) GradShardInPlace() bool { return e.inPlace != nil }

// GatherState assembles a sharded optimizer state tensor t (Shard().N() elements, packed in slab
// order) into the whole slab's values on every rank (PyTorch's consolidate_state_dict; checkpoints
// no longer store it so, but a shard file per rank: GatherShardFiles). Unsharded it returns t's
// values. A collective.
func (e *Engine) GatherState(ctx context.Context, t *tensor.Tensor) ([]float32, error) {
	if e.shard == nil {
		return tensor.ToHost(t), nil
	}
	if err := e.settle(); err != nil {
		return nil, err
	}
	if t.Len() != e.shard.N() {
		return nil, fmt.Errorf("ddp: gathering optimizer state %s: %d elements, the shard has %d", t, t.Len(), e.shard.N())
	}
	full := make([]float32, e.ps.N)
	e.shard.Unpack(full, tensor.ToHost(t))
	err := e.runGather(ctx, "optimizer state", e.hostGather(allreduce.WireF32, func(_ int, b *bucket) []float32 {
		return full[b.lo:b.hi] // this rank's segment unpacked, the rest filled by the gather
	}, nil))
	return full, err
}

// GatherShardFiles sends this rank's optimizer shard file (a sharded checkpoint's
// optim-rank-NNNNN.safetensors) to the ranks with keep[rank] — the checkpoint's writers — which
// get every rank's file, indexed by rank. The other ranks only pass the files on along the ring
// (Comm.GatherTo): they hold one at a time at most, not the whole optimizer state, and get nil
// for every rank's file but their own (mine itself). keep has one entry per rank and is the same
// on every rank. Unsharded it is an error. A collective.
func (e *Engine) GatherShardFiles(ctx context.Context, mine []byte, keep []bool) ([][]byte, error) {
	if e.shard == nil {
		return nil, fmt.Errorf("ddp: gathering optimizer shard files of an unsharded run")
	}
	if err := e.settle(); err != nil {
		return nil, err
	}
	files, err := e.comm.GatherTo(ctx, mine, keep)
	if err != nil {
		return nil, fmt.Errorf("ddp: gathering the ranks' optimizer shard files: %w", err)
	}
	return files, nil
}
