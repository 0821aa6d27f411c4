package worker

// autobatch.go: train.micro_batch: auto. The largest micro-batch whose whole training step fits is
// found by running that step (from an empty cache, until the cache serves a whole step:
// trialRunner.step): forward, backward, unscale/clip and the optimizer, with the run's
// model, precision and checkpointing, on the run's device, under train.memory_budget (set with
// Device.SetLimit, kept for the run) or the device's own memory. Batch sizes double from 1 until a
// trial runs out of memory, then bisection between the last fit and the first miss. A trial that
// runs out is caught (tensor.CatchOOM) and everything it took is freed: the model's saved state
// through model.Releaser, the temporaries of the interrupted function through the device's
// allocation events (tensor.Observable); allocated memory must be back at its baseline, or the
// search stops with an error naming what is left.
//
// The trials leave the training state as they found it: the optimizer steps at lr 0 on zeroed
// gradients (its moments stay 0 and the weights unchanged) and its step count is reset, so the
// search runs before a resumed checkpoint is loaded. Under DDP every rank searches on its own
// device and all use the smallest batch any rank found.

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/config"
)

// BatchTrial is one trial step of the search.
type BatchTrial struct {
	MicroBatch int
	Fits       bool
	Peak       int64 // peak allocated bytes above the baseline during the trial
}

// searchMaxFit returns the largest b in [1, limit] with fits(b), trying 1, 2, 4, … until a miss
// (or limit), then bisecting between the last fit and the first miss. fits is assumed monotone
// (a batch that fits makes every smaller one fit). 0 means even 1 does not fit.
func searchMaxFit(limit int, fits func(b int) (bool, error)) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("worker: micro_batch auto: no batch size to try (limit %d)", limit)
	}
	var good, bad int // fits(good) (0: nothing fits yet), !fits(bad) (the doubling's first miss)
	for b := 1; ; b *= 2 {
		b = min(b, limit)
		ok, err := fits(b)
		if err != nil {
			return 0, err
		}
		if !ok {
			bad = b
			break
		}
		good = b
		if b == limit {
			return b, nil
		}
	}
	for bad-good > 1 {
		mid := good + (bad-good)/2
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			good = mid
		} else {
			bad = mid
		}
	}
	return good, nil
}

// trialRunner runs trial steps of one model on its device.
type trialRunner struct {
	dev    tensor.Device
	cfg    *Config
	m      model.Model
	opt    Optimizer
	scaler *Scaler
}

// maxTrialSteps bounds the training steps of one trial.
const maxTrialSteps = 4

// step runs full training steps at micro-batch b, from an empty cache as the run's first step
// starts, until a step is served from the cache alone (from then on every step allocates as that
// one: the cache holds the same blocks at its start), at most maxTrialSteps, and reports whether
// they fitted, with the peak above the baseline. One step is not enough: the caching allocator
// lets a request take a cached block up to an eighth larger than its own (tensor.Pool), so the
// second step, which starts from the first one's cache, may hold more than the first. Starting
// from an empty cache makes the outcome depend on b alone, not on the trials before it.
// Whatever happens, the device's allocated bytes end where they started; when they cannot be
// brought back there it returns an error naming the blocks left.
func (r *trialRunner) step(b int) (BatchTrial, error) {
	dev, ps := r.dev, r.m.Params()
	tr := BatchTrial{MicroBatch: b}
	dev.EmptyCache()
	base := dev.Stats().Allocated
	taken := map[tensor.Buffer]tensor.AllocEvent{} // blocks of this trial still live
	obs, _ := dev.(tensor.Observable)
	if obs != nil {
		obs.SetObserver(func(e tensor.AllocEvent) {
			if e.Free {
				delete(taken, e.Buffer)
			} else {
				taken[e.Buffer] = e
			}
		})
	}
	dev.ResetPeak()
	defer r.opt.SetSteps(r.opt.Steps()) // the trial's step at lr 0 does not count
	var in, ahead *inputs
	err := tensor.CatchOOM(func() {
		in = newInputs(dev, r.m.Input(), b)
		if uploadAhead(r.cfg, dev) { // the run holds a second micro-batch of inputs
			ahead = newInputs(dev, r.m.Input(), b)
		}
		fillTrialInputs(dev, in, b)
		for k := range maxTrialSteps {
			raw := dev.Stats().RawAllocs
			ps.ZeroGrad()
			in.Inputs.GradScale = r.scaler.Scale() // as the training loop does
			loss := r.m.Forward(in.Inputs, true)
			dev.Download([]float32{0}, loss)
			r.m.Backward(r.scaler.Scale())
			r.scaler.UnscaleCheck(ps)
			if r.cfg.Train.GradClip > 0 {
				model.ClipGradNorm(ps, float32(r.cfg.Train.GradClip))
			}
			ps.ZeroGrad() // the step at lr 0 on zero gradients leaves weights and moments as they are
			r.opt.Step(0)
			dev.Sync()
			if k > 0 && dev.Stats().RawAllocs == raw {
				break // the cache served the whole step: every later step goes as this one
			}
		}
	})
	tr.Peak = dev.Stats().Peak - base
	if err != nil && !tensor.IsOOM(err) {
		return tr, err
	}
	tr.Fits = err == nil

	// Clean up: the model's saved state, the inputs, then whatever the interrupted code held.
	if rel, ok := r.m.(model.Releaser); ok {
		rel.Release()
	}
	if in != nil {
		in.free(dev)
	}
	if ahead != nil {
		ahead.free(dev)
	}
	for buf, e := range taken {
		dev.Free(tensor.NewTensor(dev, buf, tensor.F32, e.Tag, []int{0}))
	}
	if obs != nil {
		obs.SetObserver(nil)
	}
	dev.Sync()
	if now := dev.Stats().Allocated; now != base {
		return tr, fmt.Errorf("worker: micro_batch auto: the trial at micro-batch %d left %s allocated above its baseline (live: %s)",
			b, tensor.FormatBytes(now-base), liveTags(dev))
	}
	return tr, nil
}

// fillTrialInputs gives a trial step valid inputs: token and class 0 everywhere, all targets
// counted (the work and memory of a step do not depend on the values).
func fillTrialInputs(dev tensor.Device, in *inputs, b int) {
	in.Inputs = model.Inputs{Seed: 1}
	if in.tokens != nil {
		dev.UploadI32(in.tokens, make([]int32, b*in.T))
		dev.UploadI32(in.targets, make([]int32, b*in.T))
		in.Tokens, in.Targets, in.Valid = in.tokens, in.targets, b*in.T
		return
	}
	dev.Upload(in.x, make([]float32, b*in.features))
	dev.UploadI32(in.targets, make([]int32, b))
	in.X, in.Targets, in.Valid = in.x, in.targets, b
}

// liveTags lists the device's live blocks by tag with their bytes, largest first.
func liveTags(dev tensor.Device) string {
	by := map[string]int64{}
	for _, l := range dev.Live() {
		by[l.Tag] += l.Bytes
	}
	tags := make([]string, 0, len(by))
	for t := range by {
		tags = append(tags, t)
	}
	sort.Slice(tags, func(i, j int) bool { return by[tags[i]] > by[tags[j]] })
	parts := make([]string, len(tags))
	for i, t := range tags {
		parts[i] = fmt.Sprintf("%s (%s)", t, tensor.FormatBytes(by[t]))
	}
	return strings.Join(parts, ", ")
}

// findMicroBatch searches for the largest micro-batch ≤ limit whose training step fits, and returns
// it with the trials in the order they ran. The device's limit (the memory budget) must be set.
func findMicroBatch(dev tensor.Device, cfg *Config, m model.Model, opt Optimizer, scaler *Scaler, limit int) (int, []BatchTrial, error) {
	r := &trialRunner{dev: dev, cfg: cfg, m: m, opt: opt, scaler: scaler}
	var trials []BatchTrial
	best, err := searchMaxFit(limit, func(b int) (bool, error) {
		tr, err := r.step(b)
		trials = append(trials, tr)
		return tr.Fits, err
	})
	m.Params().ZeroGrad()
	dev.EmptyCache() // blocks cached by the larger trials go back
	if err != nil {
		return 0, trials, err
	}
	if best == 0 {
		return 0, trials, fmt.Errorf("worker: micro_batch auto: not even micro-batch 1 fits in %s (a step at 1 peaks at %s above the model's %s)",
			budgetName(dev), tensor.FormatBytes(trials[0].Peak), tensor.FormatBytes(dev.Stats().Allocated))
	}
	return best, trials, nil
}

func budgetName(dev tensor.Device) string {
	if l := dev.Stats().Limit; l > 0 {
		return "the memory budget of " + tensor.FormatBytes(l)
	}
	return dev.Name() + "'s memory"
}

// agreeMin returns the smallest v over the group's ranks (every rank calls it once).
func agreeMin(ctx context.Context, g *allreduce.Group, v int) (int, error) {
	if g == nil || g.Size() == 1 {
		return v, nil
	}
	buf := make([]float32, g.Size()) // rank r's value at r: a sum that is an exact gather
	buf[g.Rank()] = float32(v)
	if err := g.AllReduce(ctx, buf, allreduce.Sum, allreduce.WireF32); err != nil {
		return 0, fmt.Errorf("worker: micro_batch auto: agreeing on the batch: %w", err)
	}
	out := v
	for _, x := range buf {
		out = min(out, int(x))
	}
	return out, nil
}

// autoMicroBatch resolves train.micro_batch: auto for this rank: the search on dev under
// train.memory_budget, the agreement across ranks, then the batch arithmetic
// (config.TrainConfig.ResolveAutoBatch): with train.global_batch set, the micro-batch is the
// largest divisor of global_batch/world that fits, and grad_accum_steps makes up the rest.
// samples caps the search (the training set's size per rank). It sets the device's memory limit
// (the budget, kept for the run) and changes nothing in cfg.
func autoMicroBatch(ctx context.Context, dev tensor.Device, cfg *Config, m model.Model, opt Optimizer, scaler *Scaler,
	g *allreduce.Group, samples int, log *slog.Logger) (config.Batch, error) {
	t := cfg.Train
	world := 1
	if g != nil {
		world = g.Size()
	}
	if t.MemoryBudget.Bytes > 0 {
		dev.SetLimit(t.MemoryBudget.Bytes)
	} else if dev.Name() == "cpu" {
		return config.Batch{}, fmt.Errorf("worker: train.micro_batch auto on the cpu device needs train.memory_budget (host memory has no limit to find)")
	}
	limit := samples
	if t.GlobalBatch > 0 {
		limit = min(limit, t.GlobalBatch/world)
	}
	found, trials, err := findMicroBatch(dev, cfg, m, opt, scaler, limit)
	if err != nil {
		return config.Batch{}, err
	}
	agreed, err := agreeMin(ctx, g, found)
	if err != nil {
		return config.Batch{}, err
	}
	b, err := t.ResolveAutoBatch(agreed, world)
	if err != nil {
		return config.Batch{}, err
	}
	var tried []string
	for _, tr := range trials {
		s := "fits"
		if !tr.Fits {
			s = "OOM"
		}
		tried = append(tried, fmt.Sprintf("%d:%s(%s)", tr.MicroBatch, s, tensor.FormatBytes(tr.Peak)))
	}
	log.Info("micro_batch auto", "micro_batch", b.Micro, "grad_accum_steps", b.Accum, "global_batch", b.Global,
		"largest_fit_here", found, "largest_fit_all_ranks", agreed, "budget", budgetName(dev), "trials", strings.Join(tried, " "))
	return b, nil
}
