package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The equivalence tests: W ranks with micro-batch b and accumulation k must train like one
// process with batch W·b·k on the same samples. Each rank is a goroutine with its own CPU device,
// model replica and engine; the ranks talk over the in-process transport.

const (
	nFeat, nHidden, nClass = 12, 16, 5
)

type dataset struct {
	x []float32
	y []int32
}

func makeData(n int) dataset {
	r := rand.New(rand.NewPCG(42, 7))
	d := dataset{x: make([]float32, n*nFeat), y: make([]int32, n)}
	for i := range d.x {
		d.x[i] = float32(r.NormFloat64())
	}
	for i := range d.y {
		d.y[i] = int32(r.IntN(nClass))
	}
	return d
}

// rankRun trains one replica for steps optimizer steps and returns the final weights and the
// loss of each step (the mean over its micro-batches).
type runCfg struct {
	W, b, k, steps int
	compute        tensor.DType
	wire           allreduce.Wire
	bucketMB       float64
	injectInfRank  int // inject +Inf into this rank's gradients after the all-reduce of step injectStep
	injectStep     int
	channels       int // process groups the buckets are dealt over (0 or 1: the main one only)
	traced         bool
}

type rankResult struct {
	weights []float32
	losses  []float64
	skipped int
	infAt   []int // the ranks RanksWith named at the skipped step
	scale   float32
	hash    string
	comm    float64
	spans   []span // with traced
}

func trainRank(t *testing.T, rc runCfg, rank int, comm Comm, d dataset, extra ...Comm) rankResult {
	dev := cpu.New()
	m, opt, free := newTestMLP(t, dev, rc.compute)
	defer free()
	ps := m.Params()
	sc, err := model.NewScaler(dev, model.ScalerConfig{Enabled: rc.compute == tensor.F16, Init: 1024, Growth: 2, Backoff: 0.5, Interval: 1000, MinScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Free()
	opts := Options{BucketCapMB: rc.bucketMB, Wire: rc.wire, Channels: extra}
	var tr *recTracer
	if rc.traced {
		tr = &recTracer{}
		opts.Tracer = tr
	}
	eng := New(ps, comm, opts)
	defer eng.Close()
	ctx := context.Background()
	if err := eng.BroadcastParams(ctx); err != nil {
		t.Fatal(err)
	}
	x := dev.Alloc(tensor.F32, "x", rc.b, nFeat)
	y := dev.Alloc(tensor.I32, "y", rc.b)
	defer dev.Free(x)
	defer dev.Free(y)
	G := rc.W * rc.b * rc.k
	lh := []float32{0}
	var res rankResult
	for s := 0; s < rc.steps; s++ {
		ps.ZeroGrad()
		var loss float64
		for micro := 0; micro < rc.k; micro++ {
			lo := s*G + (micro*rc.W+rank)*rc.b
			dev.Upload(x, d.x[lo*nFeat:(lo+rc.b)*nFeat])
			dev.UploadI32(y, d.y[lo:lo+rc.b])
			l := m.Forward(model.Inputs{X: x, Targets: y, Valid: rc.b}, true)
			dev.Download(lh, l)
			loss += float64(lh[0]) / float64(rc.k)
			eng.BeginMicro(micro, rc.k)
			eng.BeginBackward()
			m.Backward(sc.Scale() / float32(rc.k))
			eng.EndBackward()
		}
		if err := eng.Wait(ctx); err != nil {
			t.Errorf("rank %d step %d: %v", rank, s, err)
			return res
		}
		if s == rc.injectStep && rank == rc.injectInfRank {
			dev.Upload(ps.Grad.View(3, 1), []float32{float32(math.Inf(1))})
		}
		found := sc.FoundInf(sc.UnscaleCheck(ps))
		ranks, err := eng.RanksWith(ctx, found)
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return res
		}
		any := len(ranks) > 0
		if any {
			res.infAt = ranks
		}
		if !any {
			opt.Step(0.05)
		} else {
			res.skipped++
		}
		if err := sc.Update(any); err != nil {
			t.Fatal(err)
		}
		// Loss of the step over all ranks: average the ranks' losses.
		lv := []float32{float32(loss)}
		if comm.Size() > 1 {
			if err := comm.AllReduce(ctx, lv, allreduce.Avg, allreduce.WireF32); err != nil {
				t.Fatal(err)
			}
		}
		res.losses = append(res.losses, float64(lv[0]))
	}
	h, err := eng.CheckReplicas(ctx, rc.steps)
	if err != nil {
		t.Errorf("rank %d: %v", rank, err)
	}
	res.hash = h
	res.weights = ps.Host()
	res.scale = sc.Scale()
	res.comm, _ = eng.CommStats()
	if tr != nil {
		res.spans = tr.spans
	}
	return res
}

// runWorld trains rc.W ranks concurrently over an in-process network.
func runWorld(t *testing.T, rc runCfg, d dataset) []rankResult {
	if rc.W == 1 {
		g, err := allreduce.NewGroup(context.Background(), allreduce.Config{Rank: 0, WorldSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		return []rankResult{trainRank(t, rc, 0, g, d)}
	}
	return inprocWorld(t, rc.W, rc.channels, func(r int, main Comm, extra []Comm) rankResult {
		return trainRank(t, rc, r, main, d, extra...)
	})
}

func maxRelDiff(a, b []float32) float64 {
	var worst float64
	for i := range a {
		d := math.Abs(float64(a[i])-float64(b[i])) / math.Max(1, math.Abs(float64(b[i])))
		worst = math.Max(worst, d)
	}
	return worst
}

func TestEngine_equivalenceF32Wire(t *testing.T) {
	for _, c := range []struct{ W, b, k int }{{2, 4, 1}, {2, 3, 2}, {4, 2, 1}, {4, 2, 3}} {
		t.Run(fmt.Sprintf("W%d_b%d_k%d", c.W, c.b, c.k), func(t *testing.T) {
			steps := 6
			G := c.W * c.b * c.k
			d := makeData(G * steps)
			// Tiny buckets, so several all-reduces overlap backward.
			ddpRes := runWorld(t, runCfg{W: c.W, b: c.b, k: c.k, steps: steps, compute: tensor.F32, wire: allreduce.WireF32, bucketMB: 0.0005}, d)
			single := runWorld(t, runCfg{W: 1, b: G, k: 1, steps: steps, compute: tensor.F32, wire: allreduce.WireF32}, d)[0]
			for r, res := range ddpRes {
				if res.hash != ddpRes[0].hash {
					t.Fatalf("rank %d param_sha256 %s differs from rank 0's %s", r, res.hash, ddpRes[0].hash)
				}
			}
			// Tolerance: float32 rounding of sums taken in another order, compounded over 6 SGD
			// steps: 2e-6 relative per weight (max(1,|w|) in the denominator).
			if d := maxRelDiff(ddpRes[0].weights, single.weights); d > 2e-6 {
				t.Fatalf("DDP weights differ from the single-process run by %g (> 2e-6)", d)
			}
			for s := range single.losses {
				if math.Abs(ddpRes[0].losses[s]-single.losses[s]) > 1e-5*math.Max(1, single.losses[s]) {
					t.Fatalf("step %d loss %g, single process %g", s, ddpRes[0].losses[s], single.losses[s])
				}
			}
		})
	}
}

// f16 compute with the f16 wire, bf16 with the bf16 wire: every rank ends bit-identical, and the
// loss curve stays within bound of one process's at every step (f16 and its wire round each
// gradient to ~1e-3 relative: 1%; bf16 keeps 8 significant bits, not 11: 2%).
func TestEngine_equivalenceHalfWires(t *testing.T) {
	for _, c := range []struct {
		compute tensor.DType
		wire    allreduce.Wire
		bound   float64
	}{{tensor.F16, allreduce.WireF16, 1e-2}, {tensor.BF16, allreduce.WireBF16, 2e-2}} {
		for _, W := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/W%d", c.wire, W), func(t *testing.T) {
				b, k, steps := 3, 2, 8
				G := W * b * k
				d := makeData(G * steps)
				ddpRes := runWorld(t, runCfg{W: W, b: b, k: k, steps: steps, compute: c.compute, wire: c.wire, bucketMB: 0.0005}, d)
				single := runWorld(t, runCfg{W: 1, b: G, k: 1, steps: steps, compute: c.compute, wire: allreduce.WireF32}, d)[0]
				for r, res := range ddpRes {
					if res.hash != ddpRes[0].hash {
						t.Fatalf("rank %d param_sha256 differs from rank 0's", r)
					}
				}
				for s := range single.losses {
					if rel := math.Abs(ddpRes[0].losses[s]-single.losses[s]) / single.losses[s]; rel > c.bound {
						t.Fatalf("step %d: loss %g with the %s wire, %g in one process (%.2g%% apart, bound %g%%)", s, ddpRes[0].losses[s], c.wire, single.losses[s], 100*rel, 100*c.bound)
					}
				}
				if ddpRes[0].losses[steps-1] >= ddpRes[0].losses[0] {
					t.Fatalf("loss did not fall: %v", ddpRes[0].losses)
				}
			})
		}
	}
}

// An inf that appears on one rank only, after the all-reduce, must still make every rank skip the
// step and back off its scale: replicas stay identical.
func TestEngine_infOnOneRankSkipsEverywhere(t *testing.T) {
	W, b, k, steps := 3, 2, 1, 4
	d := makeData(W * b * k * steps)
	res := runWorld(t, runCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16,
		bucketMB: 25, injectInfRank: 2, injectStep: 1}, d)
	for r, x := range res {
		if x.skipped != 1 {
			t.Errorf("rank %d skipped %d steps, want exactly 1", r, x.skipped)
		}
		if x.scale != 512 {
			t.Errorf("rank %d scale %g, want 512 (1024 halved once)", r, x.scale)
		}
		if x.hash != res[0].hash {
			t.Errorf("rank %d param_sha256 differs from rank 0's after the skipped step", r)
		}
		if fmt.Sprint(x.infAt) != "[2]" {
			t.Errorf("rank %d: RanksWith named %v, want [2]", r, x.infAt)
		}
	}
}

// A replica that diverges is caught by CheckReplicas on every rank, naming it.
func TestEngine_checkReplicasNamesTheRank(t *testing.T) {
	W := 3
	errs := make([]error, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		dev := cpu.New()
		m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{4, 3}, Activation: "relu", Compute: tensor.F32}, 1)
		if err != nil {
			t.Error(err)
			return
		}
		defer m.Free()
		if r == 2 {
			dev.Upload(m.Params().Data.View(0, 1), []float32{42})
		}
		e := New(m.Params(), g, Options{})
		defer e.Close()
		_, errs[r] = e.CheckReplicas(context.Background(), 7)
	})
	for r, err := range errs {
		if err == nil || !errorsIs(err, ErrReplicaMismatch) || !contains(err.Error(), "rank(s) 2 ") {
			t.Errorf("rank %d: got %v, want a mismatch naming rank 2", r, err)
		}
	}
}

// Buffers (BatchNorm running statistics) are compared too: equal parameters with a rank's
// buffers apart are a mismatch naming the rank and the buffers; after BroadcastTensors (the
// loop's per-step broadcast) the replicas agree.
func TestEngine_checkReplicasCoversBuffers(t *testing.T) {
	W := 2
	errs, after := make([]error, W), make([]error, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		dev := cpu.New()
		m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{4, 3}, Activation: "relu", Compute: tensor.F32}, 1)
		if err != nil {
			t.Error(err)
			return
		}
		defer m.Free()
		buf := dev.Alloc(tensor.F32, "bn.running", 5)
		defer dev.Free(buf)
		dev.Upload(buf, []float32{1, 2, 3, 4, float32(r)}) // running statistics of each rank's own data
		e := New(m.Params(), g, Options{})
		defer e.Close()
		e.SetBuffers([]*tensor.Tensor{buf})
		_, errs[r] = e.CheckReplicas(context.Background(), 5)
		if err := e.BroadcastTensors(context.Background(), []*tensor.Tensor{buf}); err != nil {
			t.Error(err)
		}
		_, after[r] = e.CheckReplicas(context.Background(), 6)
	})
	for r := range W {
		if err := errs[r]; err == nil || !errorsIs(err, ErrReplicaMismatch) || !contains(err.Error(), "buffers") || !contains(err.Error(), "rank(s) 1 ") {
			t.Errorf("rank %d: got %v, want a buffer mismatch naming rank 1", r, err)
		}
		if after[r] != nil {
			t.Errorf("rank %d after the broadcast: %v", r, after[r])
		}
	}
}

// Dealing buckets over several process groups (ddp.channels) changes nothing in the result: each
// bucket is reduced by the same ring, so weights are bit-identical to one channel's, on both wires.
func TestEngine_channelsAreBitIdentical(t *testing.T) {
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16} {
		W, b, k, steps := 3, 2, 2, 5
		d := makeData(W * b * k * steps)
		rc := runCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F32, wire: wire, bucketMB: 0.0005}
		one := runWorld(t, rc, d)
		rc.channels = 3
		three := runWorld(t, rc, d)
		for r := range one {
			if one[r].hash != three[r].hash {
				t.Fatalf("wire %s rank %d: 3 channels end with %s, 1 channel %s", wire, r, three[r].hash, one[r].hash)
			}
		}
	}
}
