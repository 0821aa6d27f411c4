package worker

// loop.go: the training loop, (*Trainer).Run, top to bottom. Settings are printed once; the step
// lives between the TRAINING STEP BEGIN/END markers; evaluation, checkpoints and metrics come
// after. What it runs on was set up by New (trainer.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

// Run trains to the end and returns the summary; ctx cancels it. A Trainer runs once; Close it
// after, whatever Run returned.
func (t *Trainer) Run(ctx context.Context) (*Result, error) {
	if t.ran || t.closed {
		return nil, errors.New("worker: Trainer.Run called twice, or after Close")
	}
	t.ran = true
	cfg, opt, env, log := t.cfg, t.opt, t.env, t.log
	group, dev, evalSet, m, ps, opt2, scaler := t.group, t.dev, t.evalSet, t.m, t.ps, t.optim, t.scaler
	trace, eng, st, loader, total, sched := t.trace, t.eng, &t.st, t.loader, t.total, t.sched
	metrics, prog, in := t.metrics, t.prog, t.in
	wall := t.wall
	bufs := modelBuffers(m) // nil unless the model has BatchNorm

	if env.Rank == 0 {
		printSettings(cfg, env, dev, ps, total, loader.StepsPerEpoch(), eng)
	}
	b, k, W := cfg.Train.MicroBatch, cfg.Train.GradAccumSteps, env.WorldSize
	// The micro-batches' losses stay on the device until the step's end (one read per step); a
	// micro-batch's host buffers go back to the loader once a fence after its upload has passed.
	lossDev := dev.Alloc(tensor.F32, "step losses", k)
	defer dev.Free(lossDev)
	lossHost := make([]float32, k)
	var held *data.Batch       // the last micro-batch's host buffers, until fenced
	var heldFence tensor.Fence // recorded after its upload
	release := func() {
		if held != nil {
			heldFence.Wait() // a point already behind the device's queue: not a drain
			loader.Release(held)
			held = nil
		}
	}
	defer release()
	samplesPerStep := b * k * W
	tokensPerSample := 0
	if cfg.Model.Kind == "gpt" {
		tokensPerSample = cfg.Model.Context
	}
	var lastLoss float64
	tWindow, stepsWindow := time.Now(), 0
	var dataWindow time.Duration // time the loop spent in loader.Next and issuing uploads
	var commAtLine float64       // eng.CommStats' all-reduce seconds at the last metrics line
	// The gradient norm: grad clipping computes it anyway; without clipping it is measured only
	// when metrics are asked for (--metrics, metrics.listen), at the steps that write a line
	// (metrics.go: GradNorm says what that costs).
	measureNorm := opt.MetricsPath != "" || t.prom != nil
	dev.ResetPeak()

	for step := st.Step; step < total; step++ {
		if opt.FaultHook != nil {
			if err := opt.FaultHook(step); err != nil {
				return nil, fmt.Errorf("worker: before step %d: %w", step, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tStep := time.Now()
		lr := sched(int64(step))
		logNow := cfg.Train.LogEvery > 0 && ((step+1)%cfg.Train.LogEvery == 0 || step+1 == total)
		baseline := dev.Stats().Allocated
		var memRec *memTimeline // --memory-plot records the second step (the first allocates for good)
		if opt.MemoryPlot != "" && env.Rank == 0 && step == min(st.firstStep()+1, total-1) {
			memRec = recordMemory(dev)
		}

		// ==== TRAINING STEP BEGIN ====
		ps.ZeroGrad()
		for micro := 0; micro < k; micro++ {
			td := time.Now()
			release()
			batch, err := loader.Next(ctx)
			if err != nil {
				return nil, fmt.Errorf("worker: reading batch for step %d: %w", step, err)
			}
			in.upload(dev, batch, tensor.DeriveSeed(uint64(cfg.Seed), fmt.Sprint("drop", step, micro, env.Rank)))
			held, heldFence = batch, dev.Fence() // the (asynchronous) upload reads batch until then
			dataWindow += time.Since(td)

			t0 := trace.Now()
			gscale := float32(scaler.Scale()) / float32(k)
			in.Inputs.GradScale = gscale // lets the GPT run its loss head's backward in the forward
			loss := m.Forward(in.Inputs, true)
			dev.Copy(lossDev.View(micro, 1), loss)
			t1 := trace.Now()
			trace.Span("forward", "compute", t0, t1, map[string]any{"step": step, "micro": micro})

			eng.BeginMicro(micro, k)
			eng.BeginBackward()
			m.Backward(gscale)
			if trace != nil {
				dev.Sync() // the trace's spans are host times: let them cover the device's work
				eng.EndBackward()
			} else {
				eng.EndBackwardAt(dev.Fence()) // no wait: the engine learns when backward ended
			}
			trace.Span("backward", "compute", t1, trace.Now(), map[string]any{"step": step, "micro": micro})
		}
		tw := trace.Now()
		if err := eng.Wait(ctx); err != nil {
			return nil, fmt.Errorf("worker: step %d: %w", step, err)
		}
		if opt.InjectInf != nil && opt.InjectInf(step) {
			injectInf(dev, ps, eng.Shard()) // after the all-reduce, which would otherwise write over it
		}
		trace.Span("wait for all-reduce", "compute", tw, trace.Now(), nil)

		to := trace.Now()
		found := scaler.UnscaleCheckShard(ps, eng.Shard()) // sharded: the averaged part only
		localInf := scaler.Checks() && readFlag(dev, found)
		infRanks, err := eng.RanksWith(ctx, localInf)
		if err != nil {
			return nil, fmt.Errorf("worker: step %d: %w", step, err)
		}
		anyInf := len(infRanks) > 0
		if anyInf && !scaler.Cfg.Enabled { // bf16: no scaler, no skipped step
			return nil, nonFinite(step, infRanks, env.WorldSize, scaler.Update(true))
		}
		skipped := anyInf
		gradNorm := math.NaN() // not measured (or an overflow: the step is skipped)
		if !skipped {
			// Sharded, the norm is a collective: measured at every logging step on every rank
			// (measureNorm may differ between ranks), whatever the metrics outputs.
			measure := logNow && (measureNorm || eng.Shard() != nil)
			if cfg.Train.GradClip > 0 || measure { // max 0: measures, changes nothing
				n, err := eng.ClipGradNorm(ctx, float32(max(cfg.Train.GradClip, 0))) // sharded: the global norm
				if err != nil {
					return nil, fmt.Errorf("worker: step %d: %w", step, err)
				}
				gradNorm = float64(n)
			}
			opt2.Step(lr)
			if err := eng.GatherParams(ctx); err != nil { // sharded: every rank's updated segments
				return nil, fmt.Errorf("worker: step %d: %w", step, err)
			}
		}
		if err := scaler.Update(anyInf); err != nil {
			return nil, fmt.Errorf("worker: step %d: %w", step, err)
		}
		if bufs != nil { // BatchNorm running statistics: rank 0's, every step (broadcast_buffers)
			if err := eng.BroadcastTensors(ctx, bufs); err != nil {
				return nil, fmt.Errorf("worker: step %d: buffers: %w", step, err)
			}
		}
		dev.Sync()                      // the step's one wait (micro-steps make none)
		dev.Download(lossHost, lossDev) // done by now
		var stepLoss float64
		for _, l := range lossHost {
			stepLoss += float64(l) / float64(k)
		}
		trace.Span("optimizer", "compute", to, trace.Now(), map[string]any{"skipped": skipped})
		// ==== TRAINING STEP END ====
		stepTime := time.Since(tStep)
		if memRec != nil {
			memRec.stop()
			title := fmt.Sprintf("%s, %s, micro-batch %d × %d: memory over step %d", modelLine(cfg), cfg.Precision, b, k, step)
			if err := memRec.writePNG(opt.MemoryPlot, title); err != nil {
				return nil, err
			}
			log.Info("memory plot written", "path", opt.MemoryPlot, "events", len(memRec.events))
		}

		st.Step = step + 1
		if skipped {
			st.Skipped++
		}
		lastLoss = stepLoss
		stepsWindow++
		if opt.CheckLeaks {
			if err := checkLeaks(dev, baseline, step); err != nil {
				return nil, err
			}
		}
		if opt.MemoryReport && step == st.firstStep()+1 && env.Rank == 0 {
			fmt.Fprint(os.Stderr, memoryReport(dev, ps, opt2))
		}
		commNow, _ := eng.CommStats()
		if t.prom != nil {
			t.prom.observeStep(promStep{seconds: stepTime.Seconds(), samples: samplesPerStep, tokensPerSample: tokensPerSample,
				loss: stepLoss, lossScale: float64(scaler.Scale()), gradNorm: gradNorm, step: st.Step, skipped: skipped,
				mem: dev.Stats(), eng: eng, groups: t.groups})
		}
		if logNow {
			secs := time.Since(tWindow).Seconds()
			sps := float64(stepsWindow*samplesPerStep) / secs
			ms := dev.Stats()
			prog.Update(st.Step, stepLoss, sps, fmt.Sprintf("scale %.0f", scaler.Scale()))
			metrics.Step(StepMetrics{Step: st.Step, Epoch: st.Step / loader.StepsPerEpoch(), Rank: env.Rank, Time: metricsTime(),
				Loss: stepLoss, LR: decimalF32(lr), LossScale: float64(scaler.Scale()), GradNorm: finite(gradNorm), Skipped: st.Skipped,
				SamplesPerSec: sps, TokensPerSec: sps * float64(tokensPerSample), MemAllocatedBytes: ms.Allocated, MemPeakBytes: ms.Peak,
				CommSeconds: commNow - commAtLine, StepMs: 1000 * secs / float64(stepsWindow),
				DataMs: float64(dataWindow.Microseconds()) / 1000 / float64(stepsWindow)})
			tWindow, stepsWindow, dataWindow, commAtLine = time.Now(), 0, 0, commNow
		}
		if cfg.DDP.CheckEvery > 0 && st.Step%cfg.DDP.CheckEvery == 0 {
			if _, err := eng.CheckReplicas(ctx, st.Step); err != nil {
				return nil, err
			}
		}
		evalEvery := cfg.Train.EvalEvery
		if evalEvery == 0 { // train.eval_every 0: at each epoch's end
			evalEvery = loader.StepsPerEpoch()
		}
		if st.Step%evalEvery == 0 && st.Step < total {
			te := time.Now()
			ev, err := evaluate(ctx, m, dev, evalSet, cfg, env, group)
			if err != nil {
				return nil, err
			}
			evalSecs := time.Since(te).Seconds()
			if cfg.Model.Kind == "gpt" { // a language model: loss in nats per token, no accuracy
				prog.Log("eval", "step", st.Step, "loss", fmt.Sprintf("%.4f", ev.Loss))
			} else {
				prog.Log("eval", "step", st.Step, "loss", fmt.Sprintf("%.4f", ev.Loss), "accuracy", fmt.Sprintf("%.4f", ev.Accuracy))
			}
			em := EvalMetrics{Step: st.Step, Epoch: st.Step / loader.StepsPerEpoch(), Rank: env.Rank, Time: metricsTime(),
				EvalLoss: ev.Loss, Samples: ev.Samples, Seconds: evalSecs}
			if cfg.Model.Kind != "gpt" {
				em.EvalAccuracy = Float(ev.Accuracy)
			}
			metrics.Eval(em)
			t.prom.observeEval(em.EvalLoss, em.EvalAccuracy)
		}
		if cfg.Checkpoint.Dir != "" && cfg.Checkpoint.Every > 0 && st.Step%cfg.Checkpoint.Every == 0 && st.Step < total {
			st.Loader = loader.State()
			if err := t.gatherOptimState(ctx); err != nil {
				return nil, err
			}
			if err := st.save(cfg, env, ps, opt2, scaler, log); err != nil {
				return nil, err
			}
		}
	}
	prog.Finish()

	// ---- the end: evaluation, replica check, summary ----
	ev, err := evaluate(ctx, m, dev, evalSet, cfg, env, group)
	if err != nil {
		return nil, err
	}
	hash, err := eng.CheckReplicas(ctx, st.Step)
	if err != nil {
		return nil, err
	}
	commSec, hidden := eng.CommStats()
	secs := time.Since(wall).Seconds()
	trained := st.Step - st.firstStep()
	sum := &SummaryMetrics{
		Steps: st.Step, FinalLoss: lastLoss, EvalLoss: ev.Loss, PeakMemoryBytes: dev.Stats().Peak,
		SkippedSteps: st.Skipped, Precision: string(cfg.Precision), WorldSize: env.WorldSize, Rank: env.Rank,
		WallSeconds: secs, ParamSHA256: hash, MicroBatch: b, GradAccumSteps: k,
		CommSeconds: commSec, CommHiddenFraction: hidden,
	}
	rate := float64(trained*samplesPerStep) / secs
	if cfg.Model.Kind == "gpt" {
		sum.TokensPerSec = rate * float64(tokensPerSample)
	} else {
		sum.EvalAccuracy = Float(ev.Accuracy)
	}
	sum.SamplesPerSec = rate
	t.prom.observeEval(sum.EvalLoss, sum.EvalAccuracy)
	if cfg.Checkpoint.Dir != "" { // the last checkpoint carries the summary: a run started again after this one prints it
		st.Loader = loader.State()
		st.Summary = sum
		if err := t.gatherOptimState(ctx); err != nil {
			return nil, err
		}
		if err := st.save(cfg, env, ps, opt2, scaler, log); err != nil {
			return nil, err
		}
		if err := st.waitWrite(); err != nil {
			return nil, err
		}
	}
	metrics.Summary(*sum)
	if trace != nil {
		if err := trace.WriteFile(RankPath(opt.TracePath, env.Rank)); err != nil {
			return nil, err
		}
	}
	doneKV := []any{"steps", st.Step, "eval_loss", fmt.Sprintf("%.4f", ev.Loss)}
	if cfg.Model.Kind != "gpt" {
		doneKV = append(doneKV, "eval_accuracy", fmt.Sprintf("%.4f", ev.Accuracy))
	}
	log.Info("done", append(doneKV, "param_sha256", hash[:16], "wall_s", fmt.Sprintf("%.1f", secs))...)
	return sum, nil
}

// totalSteps is train.max_steps when set (capped by train.epochs when that is set too),
// otherwise epochs × steps per epoch.
func totalSteps(cfg *Config, perEpoch int) int {
	byEpochs := cfg.Train.Epochs * perEpoch
	switch {
	case cfg.Train.MaxSteps > 0 && byEpochs > 0:
		return min(cfg.Train.MaxSteps, byEpochs)
	case cfg.Train.MaxSteps > 0:
		return cfg.Train.MaxSteps
	}
	return byEpochs
}

func readFlag(dev tensor.Device, t *tensor.Tensor) bool {
	v := []float32{0}
	dev.Download(v, t)
	return v[0] != 0
}

// nonFinite is a bf16 run's error for an inf or NaN gradient at step: which ranks held one after
// the all-reduce (every rank when it came through it: then where it began is not known).
func nonFinite(step int, ranks []int, world int, err error) error {
	where := fmt.Sprintf("on rank %v", ranks)
	if len(ranks) > 1 {
		where = fmt.Sprintf("on ranks %v", ranks)
	}
	if len(ranks) == world && world > 1 {
		where = fmt.Sprintf("on every rank (%d): it came through the all-reduce, from a rank not known", world)
	}
	return fmt.Errorf("worker: step %d: inf or NaN gradient after the all-reduce, %s: %w", step, where, err)
}

// injectInf puts +Inf into the first gradient element, after the all-reduce (tests of the
// loss-scaler agreement and of bf16's error: an inf on one rank only); sharded, into the first
// element of this rank's shard, the part it checks.
func injectInf(dev tensor.Device, ps *model.Params, sh *model.Shard) {
	at := 0
	if sh != nil && len(sh.Ranges) > 0 {
		at = sh.Ranges[0][0]
	}
	g := ps.Grad.View(at, 1)
	dev.Upload(g, []float32{float32(math.Inf(1))})
}

// gatherOptimState: under ddp.shard_optimizer every rank joins in gathering the optimizer state
// and the f32 master weights whole (collectives) for the checkpoint the writer saves next, so a checkpoint reads at any
// world size, sharded or not (PyTorch's consolidate_state_dict). Unsharded it does nothing.
func (t *Trainer) gatherOptimState(ctx context.Context) error {
	if t.eng.Shard() == nil {
		return nil
	}
	if err := t.eng.GatherMaster(ctx); err != nil { // the weights the writer saves, whole
		return fmt.Errorf("worker: checkpoint of step %d: %w", t.st.Step, err)
	}
	var whole []model.NamedTensor
	for _, s := range t.optim.State() {
		v, err := t.eng.GatherState(ctx, s.T)
		if err != nil {
			return fmt.Errorf("worker: checkpoint of step %d: %w", t.st.Step, err)
		}
		whole = append(whole, model.NamedTensor{Name: s.Name, DType: tensor.F32, Shape: []int{len(v)}, Data: model.F32Bytes(v)})
	}
	t.st.wholeOptim = whole
	return nil
}

// ---- evaluation ----

type evalResult struct {
	Loss, Accuracy float64
	Samples        int // over all ranks
}

// evaluate runs the held-out set (sharded by rank) and averages over all ranks.
func evaluate(ctx context.Context, m model.Model, dev tensor.Device, ds data.Dataset, cfg *Config, env Env, g *allreduce.Group) (evalResult, error) {
	b := cfg.Train.MicroBatch
	l, err := data.NewEvalLoader(ds, data.LoaderConfig{MicroBatch: b, Rank: env.Rank, World: env.WorldSize,
		Workers: cfg.Data.Workers, Prefetch: cfg.Data.Prefetch, MaxBatches: cfg.Train.EvalBatches})
	if err != nil {
		return evalResult{}, err
	}
	defer l.Close()
	in := newInputs(dev, cfg, b)
	defer in.free(dev)
	var lossSum, correct, count float64 // count: targets (samples or tokens)
	lossHost := []float32{0}
	for {
		batch, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return evalResult{}, err
		}
		n := in.upload(dev, batch, 0)
		loss := m.Forward(in.Inputs, false)
		dev.Download(lossHost, loss)
		lossSum += float64(lossHost[0]) * float64(n)
		count += float64(n)
		if cfg.Model.Kind != "gpt" {
			pred := in.pred.View(0, batch.Size)
			m.Predict(pred)
			got := make([]int32, batch.Size)
			dev.DownloadI32(got, pred)
			for i := 0; i < batch.Size; i++ {
				if got[i] == batch.Y[i] {
					correct++
				}
			}
		}
		l.Release(batch)
	}
	v := []float32{float32(lossSum), float32(correct), float32(count)}
	if err := g.AllReduce(ctx, v, allreduce.Sum, allreduce.WireF32); err != nil {
		return evalResult{}, fmt.Errorf("worker: averaging evaluation: %w", err)
	}
	if v[2] == 0 {
		return evalResult{}, fmt.Errorf("worker: the evaluation set is empty")
	}
	perSample := 1.0 // targets per sample: a language model's sample has one per position
	if cfg.Model.Kind == "gpt" {
		perSample = float64(cfg.Model.Context)
	}
	return evalResult{Loss: float64(v[0]) / float64(v[2]), Accuracy: float64(v[1]) / float64(v[2]),
		Samples: int(math.Round(float64(v[2]) / perSample))}, nil
}
