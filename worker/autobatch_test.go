package worker

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

func TestSearchMaxFit_doublingThenBisection(t *testing.T) {
	for _, tc := range []struct{ threshold, limit, want int }{
		{0, 64, 0}, {1, 64, 1}, {2, 64, 2}, {3, 64, 3}, {5, 64, 5}, {13, 64, 13}, {64, 64, 64}, {100, 64, 64}, {97, 200, 97}, {7, 7, 7}, {50, 7, 7},
	} {
		var tried []int
		got, err := searchMaxFit(tc.limit, func(b int) (bool, error) {
			if b < 1 || b > tc.limit {
				t.Fatalf("tried %d outside [1,%d]", b, tc.limit)
			}
			tried = append(tried, b)
			return b <= tc.threshold, nil
		})
		if err != nil || got != tc.want {
			t.Errorf("threshold %d limit %d: got %d (%v), want %d; tried %v", tc.threshold, tc.limit, got, err, tc.want, tried)
		}
		if len(tried) > 16 {
			t.Errorf("threshold %d: %d trials: %v", tc.threshold, len(tried), tried)
		}
	}
}

// tinyGPT is configs/opticks-gpt-tiny.yaml made smaller, with sets on top.
func tinyGPT(t *testing.T, sets ...string) *Config {
	t.Helper()
	cfg, err := LoadConfig(filepath.Join("..", "configs", "opticks-gpt-tiny.yaml"),
		append([]string{"model.layers=2", "model.width=64", "model.context=32", "train.max_steps=2", "train.eval_batches=2"}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// On the CPU device under a budget: the batch found fits, one more does not, the out-of-memory
// trials on the way left nothing behind, and the search agrees with trying every batch in turn.
func TestAutoBatch_findsLargestUnderBudget(t *testing.T) {
	for _, sets := range [][]string{
		{"precision=fp32"},
		{"precision=fp16", "model.checkpoint=blocks"},
		// the fused attention (the CPU's reference kernel): its saved qkv and lse, and the head
		// gradient the forward computes, are released when a trial runs out of memory
		{"precision=fp16", "model.dropout=0", "model.attention=flash"},
		{"precision=fp16", "model.dropout=0", "model.attention=flash", "model.checkpoint=blocks", "model.checkpoint_keep_attention=true"},
		// data.path set: the search builds the model only, and a GPU host has no module cache to
		// find MNIST's default path in.
		{"precision=fp32", "model.kind=mlp", "model.widths=[784,256,10]", "data.kind=mnist", "data.path=" + os.TempDir()},
	} {
		cfg := tinyGPT(t, sets...)
		dev := cpu.New()
		m, err := buildModel(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		opt, err := buildOptimizer(cfg, m.Params(), nil)
		if err != nil {
			t.Fatal(err)
		}
		scaler, err := buildScaler(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		base := dev.Stats().Allocated
		dev.SetLimit(base + 3<<20)
		const limit = 4096
		b, trials, err := findMicroBatch(dev, cfg, m, opt, scaler, limit)
		if err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		if dev.Stats().Allocated != base {
			t.Fatalf("%v: %s left after the search:\n%s", sets, tensor.FormatBytes(dev.Stats().Allocated-base), tensor.MemorySummary(dev))
		}
		sawOOM := false
		for _, tr := range trials {
			sawOOM = sawOOM || !tr.Fits
		}
		if !sawOOM || b < 2 || b >= limit {
			t.Fatalf("%v: found %d after trials %+v: want an out-of-memory trial and 2 ≤ b < %d", sets, b, trials, limit)
		}
		r := &trialRunner{dev: dev, cfg: cfg, m: m, opt: opt, scaler: scaler}
		for _, c := range []struct {
			b    int
			fits bool
		}{{b, true}, {b + 1, false}} {
			tr, err := r.step(c.b)
			if err != nil || tr.Fits != c.fits {
				t.Errorf("%v: trial at %d: fits %v (%v), want %v", sets, c.b, tr.Fits, err, c.fits)
			}
		}
		if opt.Steps() != 0 {
			t.Errorf("%v: optimizer steps %d after the search, want 0", sets, opt.Steps())
		}
		t.Logf("%v: micro-batch %d under %s (%d trials)", sets, b, budgetName(dev), len(trials))
		scaler.Free()
		opt.Free()
		m.Free()
	}
}

// A whole run with micro_batch: auto and a global batch: the micro-batch found times the
// accumulation steps is the global batch, and the weights did not move during the search (the
// run equals the same run with that micro-batch given).
func TestAutoBatch_runResolvesAccumulation(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	auto := tinyGPT(t, "train.micro_batch=auto", "train.global_batch=64", "train.memory_budget=12MiB")
	sum, err := Run(context.Background(), auto, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if sum.MicroBatch*sum.GradAccumSteps != 64 || sum.MicroBatch >= 64 || sum.MicroBatch < 2 {
		t.Fatalf("micro_batch %d × grad_accum_steps %d: want 64 with accumulation", sum.MicroBatch, sum.GradAccumSteps)
	}
	fixed := tinyGPT(t, "train.global_batch=64", "train.micro_batch="+strconv.Itoa(sum.MicroBatch))
	ref, err := Run(context.Background(), fixed, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if ref.ParamSHA256 != sum.ParamSHA256 {
		t.Errorf("auto run's weights %s differ from the fixed run's %s", sum.ParamSHA256[:12], ref.ParamSHA256[:12])
	}
	t.Logf("auto: micro_batch %d × accum %d, peak %s", sum.MicroBatch, sum.GradAccumSteps, tensor.FormatBytes(sum.PeakMemoryBytes))
}

// Every rank uses the smallest micro-batch any rank found.
func TestAgreeMin_acrossRanks(t *testing.T) {
	const n = 3
	nw := allreduce.NewInprocNetwork(n)
	gs := make([]*allreduce.Group, n)
	errs := make(chan error, n)
	for r := range gs {
		go func() {
			var err error
			gs[r], err = allreduce.NewGroup(context.Background(), allreduce.Config{Rank: r, WorldSize: n, Transport: nw.Transport(r),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			errs <- err
		}()
	}
	for range gs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	found := []int{40, 17, 33}
	got := make(chan int, n)
	for r, g := range gs {
		go func() {
			v, err := agreeMin(context.Background(), g, found[r])
			if err != nil {
				t.Error(err)
			}
			got <- v
		}()
	}
	for range gs {
		if v := <-got; v != 17 {
			t.Errorf("agreed %d, want 17", v)
		}
	}
}

// train.micro_batch: auto sees what ddp.shard_optimizer frees: the optimizer is built (on its
// shard) before the search, so under the same budget a sharded rank finds a larger micro-batch.
func TestAutoBatch_shardedOptimizerLeavesRoom(t *testing.T) {
	find := func(world int) (int, int64) {
		cfg := tinyGPT(t, "precision=fp32")
		dev := cpu.New()
		m, err := buildModel(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		opt, err := buildOptimizer(cfg, m.Params(), ddp.PlanShard(m.Params(), cfg.DDP.BucketCapMB, world, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Free()
		scaler, err := buildScaler(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer scaler.Free()
		var state int64
		for _, s := range opt.State() {
			state += s.T.Bytes()
		}
		dev.SetLimit(16 << 20)
		b, _, err := findMicroBatch(dev, cfg, m, opt, scaler, 4096)
		if err != nil {
			t.Fatal(err)
		}
		return b, state
	}
	plain, plainState := find(1)
	sharded, shardState := find(4)
	if shardState*4 > plainState+4096 {
		t.Fatalf("optimizer state %d bytes on one of four ranks, %d unsharded", shardState, plainState)
	}
	if sharded <= plain {
		t.Fatalf("micro-batch %d sharded over 4 ranks, %d unsharded, under the same budget: want larger", sharded, plain)
	}
	t.Logf("16 MiB budget: micro-batch %d unsharded (optimizer state %s), %d sharded over 4 (%s)", plain, tensor.FormatBytes(plainState), sharded, tensor.FormatBytes(shardState))
}

// train.micro_batch: auto sees what ddp.shard_master frees too: the trainer shards the f32 master
// (model.Params.ShardMaster) right after building the optimizer on its shard, before the search,
// whose trial steps then update the master's shard through MasterView. Under fp16 on one of four
// ranks, the same budget, the master sharded finds a larger micro-batch than the optimizer alone
// sharded, and its trials leave the held master as they found it.
func TestAutoBatch_shardedMasterLeavesRoom(t *testing.T) {
	find := func(shardMaster bool) (int, int64) {
		cfg := tinyGPT(t, "precision=fp16", "model.width=128", "model.layers=4")
		dev := cpu.New()
		m, err := buildModel(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		ps := m.Params()
		sh := ddp.PlanShard(ps, cfg.DDP.BucketCapMB, 4, 0)
		opt, err := buildOptimizer(cfg, ps, sh)
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Free()
		if shardMaster {
			if err := ps.ShardMaster(sh); err != nil {
				t.Fatal(err)
			}
		}
		before := tensor.ToHost(ps.MasterTensor())
		scaler, err := buildScaler(dev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer scaler.Free()
		dev.SetLimit(12 << 20)
		b, _, err := findMicroBatch(dev, cfg, m, opt, scaler, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(before, tensor.ToHost(ps.MasterTensor())) {
			t.Errorf("shard_master %v: the search's trials changed the f32 master", shardMaster)
		}
		return b, ps.MasterTensor().Bytes()
	}
	whole, wholeBytes := find(false)
	sharded, shardBytes := find(true)
	if shardBytes*3 > wholeBytes {
		t.Fatalf("the f32 master holds %d bytes on one of four ranks, %d whole: want about a quarter", shardBytes, wholeBytes)
	}
	if sharded <= whole {
		t.Fatalf("micro-batch %d with the master sharded over 4 ranks, %d with it whole, under the same budget: want larger", sharded, whole)
	}
	t.Logf("12 MiB budget: micro-batch %d with the master whole (%s), %d sharded over 4 (%s)", whole, tensor.FormatBytes(wholeBytes), sharded, tensor.FormatBytes(shardBytes))
}

func sameBits(a, b []float32) bool {
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
