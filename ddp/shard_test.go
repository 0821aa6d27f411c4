package ddp

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The sharded step (ddp.shard_optimizer) against the unsharded one: W ranks over the in-process
// network train an MLP with AdamW, gradient clipping and (under fp16) the loss scaler, once with
// every rank holding the whole optimizer state and once sharded; the master weights, the 16-bit
// copy and the optimizer state must end bit-identical.

type shardCfg struct {
	W, b, k, steps int
	compute        tensor.DType
	wire           allreduce.Wire
	bucketMB       float64
	clip           float32 // 0: measure only
	shard          bool
	channels       int
	injectRank     int // +Inf into this rank's first shard gradient at injectStep (−1: none)
	injectStep     int
	hideHost       bool             // the device without tensor.HostMemory: the host-buffer path (CUDA's)
	sgd            *model.SGDConfig // SGD instead of AdamW
	newDev         newDevFunc       // nil: the CPU device (hideHost: without HostMemory)
	device         bool             // ddp.intra_host: device (UseDevice; newDev gives an IPC device)
	overlap        bool             // Options.OverlapGather: GatherParams leaves the gather to forward
	shardMaster    bool             // the f32 master kept for the shard only (model.Params.ShardMaster; mixed precision)
	peerGather     bool             // ddp.shard_gather: device (UsePeerGather; newDev gives a tensor.PeerMirrorDevice)
	peerReduce     bool             // ddp.shard_reduce: device (UsePeerReduce; newDev's staging plans have tensor.PeerShardStaging)
	peerCopies     bool             // ddp.intra_host: copies (UsePeerCopies; newDev's staging plans have tensor.PeerGradStaging)
}

// noHostMem is the CPU device behind the bare tensor.Device interface, so without its
// tensor.HostMemory ability, as a device whose memory is not the process's: the engine keeps host
// copies of the buckets.
type noHostMem struct{ tensor.Device }

type shardResult struct {
	hash, halfHash string
	norms          []float32
	skipped        int
	m, v           []float32 // whole slab (gathered when sharded)
	stateElems     int       // elements of m on this rank
	inPlace        bool      // the engine's GradShardInPlace
	staged         bool      // the engine's Staged
	hostBytes      int64     // the engine's host buffers at the end (HostBufferBytes)
	hostUnsharded  int64
	slabElems      int
	masterElems    int   // elements of the f32 master this rank holds (model.Params.MasterTensor)
	masterLive     int64 // device bytes live under the master's tags: params (whole), params.shard
}

func trainShardRank(t *testing.T, sc shardCfg, rank int, comm Comm, d dataset, extra []Comm) shardResult {
	var dev tensor.Device = cpu.New()
	if sc.newDev != nil {
		d, done := sc.newDev(t, rank)
		defer done()
		dev = d
	}
	if sc.hideHost {
		dev = noHostMem{Device: dev}
		if _, ok := dev.(tensor.HostMemory); ok {
			t.Fatal("noHostMem still has tensor.HostMemory")
		}
	}
	m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nHidden, nClass}, Activation: "gelu", Compute: sc.compute}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	var sh *model.Shard
	if sc.shard {
		sh = PlanShard(ps, sc.bucketMB, comm.Size(), comm.Rank())
	}
	var opt model.Optimizer
	if sc.sgd != nil {
		opt, err = model.NewSGDShard(ps, *sc.sgd, sh)
	} else {
		opt, err = model.NewAdamWShard(ps, model.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}, sh)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	if model.ShardOf(opt) != sh {
		t.Fatalf("rank %d: the optimizer's shard %v, PlanShard's %v", rank, model.ShardOf(opt), sh)
	}
	scaler, err := model.NewScaler(dev, model.ScalerConfig{Enabled: sc.compute == tensor.F16, Init: 1024, Growth: 2, Backoff: 0.5, Interval: 3, MinScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer scaler.Free()
	eng := New(ps, comm, Options{BucketCapMB: sc.bucketMB, Wire: sc.wire, Channels: extra, ShardOptimizer: sc.shard,
		OverlapGather: sc.overlap, HostStaging: sc.device, DeviceGrace: 5 * time.Second})
	defer eng.Close()
	if fmt.Sprint(eng.Shard()) != fmt.Sprint(sh) {
		t.Fatalf("rank %d: the engine's shard %v, PlanShard's %v", rank, eng.Shard(), sh)
	}
	ctx := context.Background()
	if sc.device {
		if err := eng.UseDevice(ctx, 1); err != nil || !eng.Device() {
			t.Fatalf("rank %d: UseDevice: %v (device path %v)", rank, err, eng.Device())
		}
	}
	if sc.peerGather {
		if err := eng.UsePeerGather(ctx); err != nil || !eng.PeerGather() {
			t.Fatalf("rank %d: UsePeerGather: %v (peer gather %v)", rank, err, eng.PeerGather())
		}
	}
	if sc.peerReduce {
		if err := eng.UsePeerReduce(ctx); err != nil || !eng.PeerReduce() {
			t.Fatalf("rank %d: UsePeerReduce: %v (peer reduce %v)", rank, err, eng.PeerReduce())
		}
	}
	if sc.peerCopies {
		if err := eng.UsePeerCopies(ctx); err != nil || !eng.PeerCopies() {
			t.Fatalf("rank %d: UsePeerCopies: %v (copies %v)", rank, err, eng.PeerCopies())
		}
	}
	if err := eng.BroadcastParams(ctx); err != nil {
		t.Fatal(err)
	}
	if sc.shardMaster {
		if err := ps.ShardMaster(sh); err != nil {
			t.Fatal(err)
		}
		if err := eng.BroadcastParams(ctx); err == nil {
			t.Error("BroadcastParams of a sharded master: no error")
		}
	}
	x := dev.Alloc(tensor.F32, "x", sc.b, nFeat)
	y := dev.Alloc(tensor.I32, "y", sc.b)
	defer dev.Free(x)
	defer dev.Free(y)
	G := sc.W * sc.b * sc.k
	var res shardResult
	for s := 0; s < sc.steps; s++ {
		ps.ZeroGrad()
		for micro := 0; micro < sc.k; micro++ {
			lo := s*G + (micro*sc.W+rank)*sc.b
			dev.Upload(x, d.x[lo*nFeat:(lo+sc.b)*nFeat])
			dev.UploadI32(y, d.y[lo:lo+sc.b])
			m.Forward(model.Inputs{X: x, Targets: y, Valid: sc.b}, true)
			eng.BeginMicro(micro, sc.k)
			eng.BeginBackward()
			m.Backward(scaler.Scale() / float32(sc.k))
			eng.EndBackward()
		}
		if err := eng.Wait(ctx); err != nil {
			t.Errorf("rank %d step %d: %v", rank, s, err)
			return res
		}
		if s == sc.injectStep && rank == sc.injectRank {
			at := 0
			if sh != nil {
				at = sh.Ranges[0][0]
			}
			dev.Upload(ps.Grad.View(at, 1), []float32{float32(math.Inf(1))})
		}
		found := scaler.FoundInf(scaler.UnscaleCheckShard(ps, eng.Shard()))
		ranks, err := eng.RanksWith(ctx, found)
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return res
		}
		if len(ranks) == 0 {
			norm, err := eng.ClipGradNorm(ctx, sc.clip)
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return res
			}
			res.norms = append(res.norms, norm)
			opt.Step(0.01)
			if err := eng.GatherParams(ctx); err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return res
			}
		} else {
			res.skipped++
		}
		if err := scaler.Update(len(ranks) > 0); err != nil {
			t.Fatal(err)
		}
	}
	h, err := eng.CheckReplicas(ctx, sc.steps)
	if err != nil {
		t.Errorf("rank %d: %v", rank, err)
	}
	res.hash = h
	if ps.Half != nil {
		res.halfHash = model.HashF32(tensor.ToHost(ps.Half))
	}
	st := opt.State() // AdamW's m and v; SGD's momentum (m only)
	res.stateElems = st[0].T.Len()
	res.inPlace = eng.GradShardInPlace()
	res.staged = eng.Staged()
	res.hostBytes, res.hostUnsharded = eng.HostBufferBytes()
	res.slabElems = ps.N
	res.masterElems = ps.MasterTensor().Len()
	for _, l := range dev.Live() {
		if l.Tag == "params" || l.Tag == "params.shard" {
			res.masterLive += l.Bytes
		}
	}
	if res.m, err = eng.GatherState(ctx, st[0].T); err != nil {
		t.Error(err)
	}
	if len(st) > 1 {
		if res.v, err = eng.GatherState(ctx, st[1].T); err != nil {
			t.Error(err)
		}
	}
	return res
}

func runShardWorld(t *testing.T, sc shardCfg, d dataset) []shardResult {
	return inprocWorld(t, sc.W, sc.channels, func(r int, main Comm, extra []Comm) shardResult {
		return trainShardRank(t, sc, r, main, d, extra)
	})
}

func sameF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// Sharded equals unsharded bit for bit: weights (param_sha256), the 16-bit copy, the gradient
// norms, AdamW's m and v, with accumulation, clipping that bites, tiny buckets (segments cut
// across parameters) and several channels, on the f32, f16 and bf16 wires; and again with
// ddp.overlap_gather (gather_overlap.go: the weights' all-gather left in flight, the next forward
// waiting for each bucket as it reads it — fp32's f32 master, the 16-bit copies after the norms'
// masters), on the in-place and host-buffer paths; and under fp16 and bf16 with the f32 master
// kept for the shard only (model.Params.ShardMaster, ddp.shard_master; checkMasterShard: the
// device holds the shard's master, no whole slab), with and without the overlap.
func TestShard_bitIdenticalToUnsharded(t *testing.T) {
	type tc struct {
		compute tensor.DType
		wire    allreduce.Wire
	}
	for _, c := range []tc{{tensor.F32, allreduce.WireF32}, {tensor.F16, allreduce.WireF16}, {tensor.BF16, allreduce.WireBF16}, {tensor.F32, allreduce.WireF16}} {
		for _, W := range []int{2, 4} {
			for _, ch := range []int{1, 2} {
				for _, hide := range []bool{false, true} {
					name := fmt.Sprintf("%s_wire%s/W%d/ch%d", c.compute, c.wire, W, ch)
					if hide {
						name += "/hostbuffers"
					}
					t.Run(name, func(t *testing.T) {
						b, k, steps := 3, 2, 6
						d := makeData(W * b * k * steps)
						sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: c.compute, wire: c.wire, bucketMB: 0.0005,
							clip: 0.5, channels: ch, injectRank: -1, hideHost: hide}
						plain := runShardWorld(t, sc, d)
						sc.shard = true
						sharded := runShardWorld(t, sc, d)
						checkSame(t, plain, sharded)
						checkHostBuffers(t, sc, plain, sharded)
						if sharded[0].norms[0] <= sc.clip {
							t.Errorf("the first step's norm %g does not exceed the clip %g: clipping was not exercised", sharded[0].norms[0], sc.clip)
						}
						sc.overlap = true // ddp.overlap_gather: the next forward waits for each bucket itself
						checkSame(t, plain, runShardWorld(t, sc, d))
						if c.compute != tensor.F32 { // the f32 master kept for the shard only
							sc.shardMaster = true
							for _, overlap := range []bool{false, true} {
								sc.overlap = overlap
								sm := runShardWorld(t, sc, d)
								checkSame(t, plain, sm)
								checkMasterShard(t, plain, sm)
							}
						}
					})
				}
			}
		}
	}
}

// checkSame: the sharded run ended as the unsharded one (checkSameTraining), with 1/W of its
// optimizer state on each rank.
func checkSame(t *testing.T, plain, sharded []shardResult) {
	t.Helper()
	checkSameTraining(t, plain, sharded)
	for r := range sharded {
		p, s := plain[r], sharded[r]
		if s.stateElems*len(sharded) > p.stateElems+len(sharded)*64 {
			t.Errorf("rank %d: %d optimizer state elements sharded over %d ranks, %d unsharded", r, s.stateElems, len(sharded), p.stateElems)
		}
	}
}

// checkSameTraining: run ended with the reference run's weights (param_sha256, the 16-bit copy),
// gradient norms, AdamW's m and v and skipped steps, on every rank.
func checkSameTraining(t *testing.T, ref, run []shardResult) {
	t.Helper()
	for r := range run {
		p, s := ref[r], run[r]
		if s.hash != p.hash {
			t.Errorf("rank %d: param_sha256 %s, the reference run's %s", r, s.hash, p.hash)
		}
		if s.halfHash != p.halfHash {
			t.Errorf("rank %d: the 16-bit copy differs", r)
		}
		if fmt.Sprint(s.norms) != fmt.Sprint(p.norms) {
			t.Errorf("rank %d: gradient norms %v, the reference run's %v", r, s.norms, p.norms)
		}
		if !sameF32(s.m, p.m) || !sameF32(s.v, p.v) {
			t.Errorf("rank %d: AdamW's gathered m, v differ from the reference run's", r)
		}
		if s.skipped != p.skipped {
			t.Errorf("rank %d: skipped %d, the reference run %d", r, s.skipped, p.skipped)
		}
	}
}

// checkMasterShard: with the master sharded each rank's device holds the f32 master of its
// shard only (the MLP has no MasterRead parameter, so exactly the optimizer state's elements):
// no whole slab is live, and the shard slab's block is 4 bytes per held element (rounded to the
// allocator's size class); unsharded, the whole slab's.
func checkMasterShard(t *testing.T, plain, sharded []shardResult) {
	t.Helper()
	for r := range sharded {
		p, s := plain[r], sharded[r]
		if p.masterElems != p.slabElems || p.masterLive != tensor.SizeClass(4*int64(p.slabElems)) {
			t.Errorf("rank %d unsharded: master of %d elements (%d bytes live), want the whole %d", r, p.masterElems, p.masterLive, p.slabElems)
		}
		if want := tensor.SizeClass(4 * int64(s.stateElems)); s.masterElems != s.stateElems || s.masterLive != want {
			t.Errorf("rank %d with the master sharded: master of %d elements (%d bytes live under params and params.shard), want the shard's %d (%d bytes)",
				r, s.masterElems, s.masterLive, s.stateElems, want)
		}
		if s.masterElems*len(sharded) > s.slabElems+len(sharded)*64 {
			t.Errorf("rank %d: master of %d elements over %d ranks of a %d-element slab: not about N/W", r, s.masterElems, len(sharded), s.slabElems)
		}
	}
}

// SGD sharded: its momentum buffer holds the shard's elements only and the run is bit-identical
// to the unsharded one (weights, 16-bit copy, gathered momentum), plain and Nesterov momentum,
// fp32 and fp16, W 2 and 4, with clipping.
func TestShard_sgdBitIdenticalToUnsharded(t *testing.T) {
	type tc struct {
		compute tensor.DType
		wire    allreduce.Wire
	}
	for _, c := range []tc{{tensor.F32, allreduce.WireF32}, {tensor.F16, allreduce.WireF16}} {
		for _, W := range []int{2, 4} {
			for _, nesterov := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/W%d/nesterov_%v", c.compute, W, nesterov), func(t *testing.T) {
					b, k, steps := 3, 2, 6
					d := makeData(W * b * k * steps)
					sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: c.compute, wire: c.wire, bucketMB: 0.0005,
						clip: 0.5, channels: 2, injectRank: -1, sgd: &model.SGDConfig{Momentum: 0.9, Nesterov: nesterov, WeightDecay: 0.01}}
					plain := runShardWorld(t, sc, d)
					sc.shard = true
					sharded := runShardWorld(t, sc, d)
					checkSame(t, plain, sharded)
					checkHostBuffers(t, sc, plain, sharded)
					if len(sharded[0].m) != sharded[0].slabElems || sharded[0].v != nil {
						t.Errorf("gathered momentum of %d elements (v %d), want %d and none", len(sharded[0].m), len(sharded[0].v), sharded[0].slabElems)
					}
				})
			}
		}
	}
}

// checkHostBuffers: stage 2 on a HostMemory device holds no host copy of the gradients — none
// at all under fp32, only the channels' scratch (one largest bucket each) for the 16-bit
// weights' gather under mixed precision; unsharded, and on a device without HostMemory, the
// buckets' f32 copies of the whole slab.
func checkHostBuffers(t *testing.T, sc shardCfg, plain, sharded []shardResult) {
	t.Helper()
	whole := 4 * int64(plain[0].slabElems)
	largest := int64(4 * (int(sc.bucketMB*(1<<20)) / 4)) // the bucket cap
	for r := range sharded {
		p, s := plain[r], sharded[r]
		if p.inPlace || p.hostBytes != whole || p.hostUnsharded != whole {
			t.Errorf("rank %d unsharded: in place %v, host buffers %d bytes (unsharded %d), want %d", r, p.inPlace, p.hostBytes, p.hostUnsharded, whole)
		}
		switch {
		case sc.hideHost:
			if s.inPlace || s.hostBytes != whole {
				t.Errorf("rank %d sharded without HostMemory: in place %v, host buffers %d bytes, want %d", r, s.inPlace, s.hostBytes, whole)
			}
		case sc.compute == tensor.F32:
			if !s.inPlace || s.hostBytes != 0 {
				t.Errorf("rank %d sharded fp32: in place %v, host buffers %d bytes, want none", r, s.inPlace, s.hostBytes)
			}
		default:
			if lim := int64(max(1, sc.channels)) * largest; !s.inPlace || s.hostBytes <= 0 || s.hostBytes > lim {
				t.Errorf("rank %d sharded %s: in place %v, host buffers %d bytes, want some, at most %d (a bucket per channel)",
					r, sc.compute, s.inPlace, s.hostBytes, lim)
			}
		}
	}
}

// An fp16 step with an inf on one rank's shard is skipped on every rank, as unsharded, and the
// run stays bit-identical to the unsharded one.
func TestShard_skippedStepAsUnsharded(t *testing.T) {
	W, b, k, steps := 3, 2, 1, 5
	d := makeData(W * b * k * steps)
	sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16, bucketMB: 0.0005,
		injectRank: 1, injectStep: 2}
	plain := runShardWorld(t, sc, d)
	sc.shard = true
	for _, overlap := range []bool{false, true} {
		sc.overlap = overlap
		sharded := runShardWorld(t, sc, d)
		checkSame(t, plain, sharded)
		for r, s := range sharded {
			if s.skipped != 1 {
				t.Errorf("overlap_gather %v: rank %d skipped %d steps, want 1", overlap, r, s.skipped)
			}
		}
	}
}

// The shards tile the slab: every element is owned by exactly one rank.
func TestPlanShard_tilesTheSlab(t *testing.T) {
	dev := cpu.New()
	m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nHidden, nClass}, Activation: "gelu", Compute: tensor.F32}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	for _, W := range []int{2, 3, 4, 7} {
		for _, capMB := range []float64{0.0005, 25} {
			owner := make([]int, ps.N)
			for r := 0; r < W; r++ {
				sh := PlanShard(ps, capMB, W, r)
				for _, rg := range sh.Ranges {
					for i := rg[0]; i < rg[1]; i++ {
						owner[i]++
					}
				}
				if n := sh.N(); n < ps.N/W-64 || n > ps.N/W+64 {
					t.Errorf("W %d cap %g rank %d: %d elements of %d", W, capMB, r, n, ps.N)
				}
			}
			for i, c := range owner {
				if c != 1 {
					t.Fatalf("W %d cap %g: element %d owned %d times", W, capMB, i, c)
				}
			}
		}
	}
}

func shardStagingDev(t *testing.T, rank int) (tensor.Device, func()) {
	return shardStagingCPU{cpu.New()}, func() {}
}

// The sharded step on the staged path (shard_gpu.go), on a CPU device staging like the CUDA
// device (shardStagingCPU): fp16 with the f16 wire, the gradients reduce-scattered as half and
// only the owned segment widened back, the f16 weights all-gathered through the staging buffers;
// bit-identical to the unsharded staged run (weights, 16-bit copy, norms, m and v), with
// accumulation, clipping, several channels and a skipped step, with and without
// ddp.overlap_gather (each bucket's weights landing as forward reads them), with and without the
// f32 master kept for the shard only (ddp.shard_master: checkMasterShard). runShardStaged is
// the same harness on the GPU (shard_gpu_cuda_test.go).
func TestShardStaged_bitIdenticalToUnsharded(t *testing.T) {
	runShardStaged(t, shardStagingDev)
}

func runShardStaged(t *testing.T, newDev newDevFunc) {
	for _, W := range []int{2, 4} {
		for _, ch := range []int{1, 2} {
			for _, v := range []struct{ overlap, master bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
				overlap := v.overlap
				name := fmt.Sprintf("W%d/ch%d", W, ch)
				if overlap {
					name += "/overlap_gather"
				}
				if v.master {
					name += "/shard_master"
				}
				t.Run(name, func(t *testing.T) {
					b, k, steps := 3, 2, 6
					d := makeData(W * b * k * steps)
					sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16, bucketMB: 0.0005,
						clip: 0.5, channels: ch, injectRank: 1, injectStep: 3, newDev: newDev}
					plain := runShardWorld(t, sc, d)
					sc.shard, sc.overlap, sc.shardMaster = true, overlap, v.master
					sharded := runShardWorld(t, sc, d)
					checkSame(t, plain, sharded)
					if v.master {
						checkMasterShard(t, plain, sharded)
					}
					for r := range sharded {
						if !plain[r].staged || !sharded[r].staged || sharded[r].inPlace || sharded[r].hostBytes != 0 {
							t.Errorf("rank %d: staged %v unsharded, %v sharded (in place %v, host buffers %d bytes): want the staged path, no host copy",
								r, plain[r].staged, sharded[r].staged, sharded[r].inPlace, sharded[r].hostBytes)
						}
						if sharded[r].skipped != 1 {
							t.Errorf("rank %d skipped %d steps, want 1", r, sharded[r].skipped)
						}
					}
				})
			}
		}
	}
}

// Sharded under bf16 on a device that stages like CUDA: the sharded staged path is f16's only,
// so the engine falls back (here to the in-place path) and stays bit-identical to unsharded.
func TestShardStaged_bf16FallsBackBitIdentical(t *testing.T) {
	W, b, k, steps := 2, 3, 1, 4
	d := makeData(W * b * k * steps)
	sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.BF16, wire: allreduce.WireBF16, bucketMB: 0.0005,
		clip: 0.5, channels: 1, injectRank: -1, newDev: shardStagingDev}
	plain := runShardWorld(t, sc, d)
	sc.shard = true
	sharded := runShardWorld(t, sc, d)
	checkSame(t, plain, sharded)
	for r, s := range sharded {
		if s.staged || !s.inPlace {
			t.Errorf("rank %d: staged %v, in place %v; want the in-place path", r, s.staged, s.inPlace)
		}
	}
}

// GatherShardFiles gives every rank's optimizer shard file to the ranks keep names (the
// checkpoint's writers) and to no other: those get their own file alone. On the flat ring with
// rank 0 the writer, and over a Hierarchy of two hosts of two ranks with checkpoint.per_host's
// writers (each host's local rank 0: GatherTo is the main group's).
func TestGatherShardFiles_onlyTheWritersGetThem(t *testing.T) {
	file := func(r int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("optim-rank-%05d;", r)), 3000*(r+1)) }
	gather := func(r int, comm Comm, keep []bool) [][]byte {
		m, err := model.NewMLP(cpu.New(), model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}}, 3)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer m.Free()
		eng := New(m.Params(), comm, Options{BucketCapMB: 0.01, ShardOptimizer: true})
		defer eng.Close()
		if eng.Shard() == nil {
			t.Errorf("rank %d: the engine is not sharded", r)
			return nil
		}
		mine := file(r)
		files, err := eng.GatherShardFiles(context.Background(), mine, keep)
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			return nil
		}
		if !keep[r] && len(files) > r && &files[r][0] != &mine[0] {
			t.Errorf("rank %d (not a writer): its own file is not the one it sent", r)
		}
		return files
	}
	check := func(name string, keep []bool, got [][][]byte) {
		t.Helper()
		for r, files := range got {
			if len(files) != len(keep) {
				t.Fatalf("%s: rank %d: %d files, want %d", name, r, len(files), len(keep))
			}
			for o, f := range files {
				switch {
				case (keep[r] || o == r) && !bytes.Equal(f, file(o)):
					t.Fatalf("%s: rank %d (writer %v): rank %d's file has %d bytes, want its %d", name, r, keep[r], o, len(f), len(file(o)))
				case !keep[r] && o != r && f != nil:
					t.Fatalf("%s: rank %d, not a writer, received rank %d's file (%d bytes)", name, r, o, len(f))
				}
			}
		}
	}
	flat := []bool{true, false, false}
	check("flat", flat, inprocWorld(t, 3, 1, func(r int, main Comm, _ []Comm) [][]byte { return gather(r, main, flat) }))
	perHost := []bool{true, false, true, false}
	check("per host", perHost, hierWorld(t, 2, 2, func(r int, comm Comm) [][]byte { return gather(r, comm, perHost) }))
}
