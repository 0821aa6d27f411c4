package worker

// loop.go: the training loop, (*Trainer).Run, top to bottom. Settings are printed once; the step
// lives between the TRAINING STEP BEGIN/END markers; evaluation, checkpoints and metrics come
// after. What it runs on was set up by New (trainer.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/data"
	"github.com/goddp/goddp/worker/observe"
)

// Run trains to the end and returns the summary; ctx cancels it. A Trainer runs once; Close it
// after, whatever Run returned.
//
// It reads like llm.c's main: the settings once, then per step the fault hook, the step between
// the TRAINING STEP BEGIN/END markers (micro-steps, the all-reduce, the loss scaler's agreement,
// norm, lr and update, the loss read back), and after END the diagnostics: the step's record to
// the observers, replica checks, evaluation, checkpoints. The end: a last evaluation, replica
// check, checkpoint and the summary (finish).
func (t *Trainer) Run(ctx context.Context) (*Result, error) {
	if t.ran || t.closed {
		return nil, errors.New("worker: Trainer.Run called twice, or after Close")
	}
	t.ran = true
	cfg, env, dev, ps, st := t.cfg, t.env, t.dev, t.ps, &t.st
	if t.syncBN != nil {
		t.syncBN.SetContext(ctx) // SyncBatchNorm's reductions end with the run, not the setup
	}
	if env.Rank == 0 {
		printSettings(cfg, t.spec, env, dev, ps, t.total, t.loader.StepsPerEpoch(), t.eng)
	}
	k := cfg.Train.GradAccumSteps
	ls := t.newLoopState()
	defer ls.free()
	// The gradient norm: grad clipping computes it anyway; without clipping it is measured only
	// when metrics are asked for (--metrics, metrics.listen), at the steps that write a line
	// (observe.StepMetrics: GradNorm says what that costs).
	measureNorm := t.opt.MetricsPath != "" || t.prom != nil
	if n := t.opt.ProfileStep; n > 0 && (n <= st.Step || n+t.profileSteps()-1 > t.total) {
		return nil, fmt.Errorf("worker: --profile-step %d (%d steps): this run trains steps %d to %d", n, t.profileSteps(), st.Step+1, t.total)
	}
	dev.ResetPeak()
	leakBase := int64(-1) // --check-leaks: allocated at the end of the run's first step
	if env.Rank == 0 && st.Step < t.total {
		kv := []any{"step", st.Step, "of", t.total}
		if le := cfg.Train.LogEvery; le > 0 {
			kv = append(kv, "first_log_at_step", min((st.Step/le+1)*le, t.total))
		}
		t.log.Info("training: the first step (it allocates for good and may take longer)", kv...)
	}
	t.prog.Start(st.Step) // the ETA from the rate of this process's steps, after the setup

	for step := st.Step; step < t.total; step++ {
		if err := t.beforeStep(ctx, step); err != nil {
			return nil, err
		}
		tStep := time.Now()
		lr := t.sched(int64(step))
		logNow := cfg.Train.LogEvery > 0 && ((step+1)%cfg.Train.LogEvery == 0 || step+1 == t.total)
		memRec := t.startMemoryPlot(step)
		t.startProfile(ls, step)

		// ==== TRAINING STEP BEGIN ====
		ps.ZeroGrad()
		for micro := 0; micro < k; micro++ {
			if err := t.microStep(ctx, ls, step, micro); err != nil {
				return nil, err
			}
		}
		if err := t.waitAllReduce(ctx, step); err != nil {
			return nil, err
		}
		if t.opt.InjectInf != nil && t.opt.InjectInf(step) {
			injectInf(dev, ps, t.eng.Shard()) // after the all-reduce, which would otherwise write over it
		}
		// Sharded, the norm is a collective: measured at every logging step on every rank
		// (measureNorm may differ between ranks), whatever the metrics outputs.
		res, err := t.update(ctx, ls, step, lr, logNow && (measureNorm || t.eng.Shard() != nil))
		if err != nil {
			return nil, err
		}
		// ==== TRAINING STEP END ====
		stepTime := time.Since(tStep)
		t.finishProfile(ls, step)
		if err := t.finishMemoryPlot(memRec, step); err != nil {
			return nil, err
		}
		st.Step = step + 1
		if res.skipped {
			st.Skipped++
		}
		ls.lastLoss = res.loss
		ls.window.steps++
		if err := t.checkMemory(step, &leakBase, memRec); err != nil {
			return nil, err
		}
		t.obs.Step(t.stepRecord(ls, res, lr, stepTime, logNow))
		if err := t.afterStep(ctx); err != nil {
			return nil, err
		}
	}
	return t.finish(ctx, ls)
}

// loopState is what one Run keeps from step to step: the device buffer of the step's losses,
// the micro-batch whose upload may still be reading its host buffers, and the metrics window.
type loopState struct {
	t *Trainer
	// The micro-batches' losses stay on the device until the step's end (one read per step).
	lossDev  *tensor.Tensor // (k)
	lossHost []float32      // (k)
	// A micro-batch's host buffers go back to the loader once a fence after its upload has passed.
	held      *data.Batch  // the last micro-batch's host buffers, until fenced
	heldFence tensor.Fence // recorded after its upload
	// The input buffers may be written again once the device is done with the last micro-step
	// that read them (backward reads them too: the first layer's weight gradient, the
	// embedding's): a fence after that micro-step's backward, nil when nothing is pending.
	inFree, aheadFree tensor.Fence // for t.in and t.ahead
	// data.upload_ahead: the next micro-batch, shown by the loader's Peek and uploaded into
	// t.ahead while this one's backward runs; Next then returns it (uploadAhead).
	ahead      *data.Batch
	aheadFence tensor.Fence   // recorded after its upload
	lastLoss   float64        // the last step's loss: the summary's final_loss
	prof       kernelProfiler // --profile-step's profile while it runs
	window     struct {       // since the last metrics line / progress update
		start  time.Time
		steps  int
		data   time.Duration // time the loop spent in loader.Next and issuing uploads
		commAt float64       // eng.CommStats' all-reduce seconds at the window's start
	}
}

func (t *Trainer) newLoopState() *loopState {
	k := t.cfg.Train.GradAccumSteps
	ls := &loopState{t: t, lossDev: t.dev.Alloc(tensor.F32, "step losses", k), lossHost: make([]float32, k)}
	ls.window.start = time.Now()
	return ls
}

// release gives the held micro-batch back to the loader once the device has read it.
func (ls *loopState) release() {
	if ls.held != nil {
		ls.heldFence.Wait() // a point already behind the device's queue: not a drain
		ls.t.loader.Release(ls.held)
		ls.held = nil
	}
}

func (ls *loopState) free() {
	ls.release()
	if ls.ahead != nil { // its upload may still read the loader's buffer
		ls.aheadFence.Wait()
		ls.ahead = nil
	}
	ls.t.dev.Free(ls.lossDev)
}

// beforeStep runs the test hook (Options.FaultHook) and stops on a cancelled ctx.
func (t *Trainer) beforeStep(ctx context.Context, step int) error {
	if t.opt.FaultHook != nil {
		if err := t.opt.FaultHook(step); err != nil {
			return fmt.Errorf("worker: before step %d: %w", step, err)
		}
	}
	return ctx.Err()
}

// microStep is one micro-batch of step: the batch uploaded, forward (its loss kept on the
// device), backward with the DDP engine told where the step stands (it all-reduces the buckets
// on the step's last micro-step, overlapped with backward).
func (t *Trainer) microStep(ctx context.Context, ls *loopState, step, micro int) error {
	cfg, dev, trace, eng := t.cfg, t.dev, t.trace, t.eng
	k := cfg.Train.GradAccumSteps
	td, tdt := time.Now(), trace.Now()
	ls.release()
	batch, err := t.loader.Next(ctx)
	if err != nil {
		return fmt.Errorf("worker: reading batch for step %d: %w", step, err)
	}
	seed := tensor.DeriveSeed(uint64(cfg.Seed), fmt.Sprint("drop", step, micro, t.env.Rank))
	if batch == ls.ahead { // uploaded during the last micro-step's backward (uploadAhead)
		t.in, t.ahead = t.ahead, t.in
		ls.inFree, ls.aheadFree = ls.aheadFree, ls.inFree
		t.in.Inputs.Seed = seed
		ls.held, ls.heldFence = batch, ls.aheadFence
		ls.ahead, ls.aheadFence = nil, nil
		t.aheadTaken++
	} else {
		if ls.inFree != nil {
			// With accumulation the last micro-step's backward may still read these buffers
			// (after a step's end, whose loss was read, it cannot): a wait only then.
			ls.inFree.Wait()
		}
		t.in.upload(dev, batch, seed)
		ls.held, ls.heldFence = batch, dev.Fence() // the (asynchronous) upload reads batch until then
	}
	in := t.in
	ls.window.data += time.Since(td)
	trace.Span("data", "compute", tdt, trace.Now(), map[string]any{"step": step, "micro": micro})

	t0 := trace.Now()
	gscale := float32(t.scaler.Scale()) / float32(k)
	in.Inputs.GradScale = gscale // lets the GPT run its loss head's backward in the forward
	loss := t.m.Forward(in.Inputs, true)
	dev.Copy(ls.lossDev.View(micro, 1), loss)
	t1 := trace.Now()
	trace.Span("forward", "compute", t0, t1, map[string]any{"step": step, "micro": micro})

	eng.BeginMicro(micro, k)
	eng.BeginBackward()
	t.m.Backward(gscale)
	if err := model.SyncErr(t.m); err != nil { // SyncBatchNorm's reductions (none unless set)
		return fmt.Errorf("worker: step %d micro %d: %w", step, micro, err)
	}
	if trace != nil {
		// The host's enqueueing alone, then the wait for the device: where the first is most of
		// the second, the host bounds the step.
		trace.Span("backward enqueue", "compute", t1, trace.Now(), map[string]any{"step": step, "micro": micro})
		dev.Sync() // the trace's spans are host times: let them cover the device's work
		eng.EndBackward()
	} else {
		eng.EndBackwardAt(dev.Fence()) // no wait: the engine learns when backward ended
	}
	ls.inFree = dev.Fence() // backward is the last to read this micro-batch's inputs
	trace.Span("backward", "compute", t1, trace.Now(), map[string]any{"step": step, "micro": micro})
	if t.ahead != nil && (step+1 < t.total || micro+1 < k) {
		t.uploadAhead(ctx, ls, step, micro)
	}
	return nil
}

// uploadAhead (data.upload_ahead) uploads the next micro-batch into t.ahead while this one's
// backward runs on the device: the loader's Peek shows it without moving the stream (a checkpoint
// written before the next micro-step still resumes at it), and the next micro-step, given the
// same batch by Next, only swaps the buffers. The upload waits for the device to be done with
// t.ahead (the micro-step before this one), which it normally is; a batch the loader cannot give
// is left to Next, which reports it.
func (t *Trainer) uploadAhead(ctx context.Context, ls *loopState, step, micro int) {
	td, tdt := time.Now(), t.trace.Now()
	b, err := t.loader.Peek(ctx)
	if err != nil {
		return
	}
	if ls.aheadFree != nil {
		ls.aheadFree.Wait()
		ls.aheadFree = nil
	}
	t.ahead.load(t.dev, b)
	ls.ahead, ls.aheadFence = b, t.dev.Fence()
	ls.window.data += time.Since(td)
	t.trace.Span("data ahead", "compute", tdt, t.trace.Now(), map[string]any{"step": step, "micro": micro})
}

// waitAllReduce waits for the step's averaged gradients (ddp.Engine.Wait).
func (t *Trainer) waitAllReduce(ctx context.Context, step int) error {
	tw := t.trace.Now()
	if err := t.eng.Wait(ctx); err != nil {
		return fmt.Errorf("worker: step %d: %w", step, err)
	}
	t.trace.Span("wait for all-reduce", "compute", tw, t.trace.Now(), nil)
	return nil
}

// stepResult is what a step's update reports.
type stepResult struct {
	loss     float64 // mean over the micro-batches
	gradNorm float64 // NaN when not measured (or an overflow: the step is skipped)
	skipped  bool    // a gradient overflowed on some rank: no update
}

// update is the step's end: the loss scaler unscales and checks the gradients (its read-back waits
// for the device), every rank agrees whether any overflowed (then
// the step is skipped), the gradient norm (clipped with train.grad_clip, else measured when
// measureNorm), the optimizer at lr, the scaler's update, the model's buffers from rank 0, and the
// losses — read with the scaler's read-back, no wait for the optimizer (the default since session
// 21), or after a wait for the device (GODDP_STEP_END_WAIT=1, or no read-back this step).
func (t *Trainer) update(ctx context.Context, ls *loopState, step int, lr float32, measureNorm bool) (stepResult, error) {
	cfg, dev, ps, scaler, eng := t.cfg, t.dev, t.ps, t.scaler, t.eng
	to := t.trace.Now()
	clipping := cfg.Train.GradClip > 0 || measureNorm // max 0: measures, changes nothing
	// The norm with the check: one read of the gradients where the device fuses them
	// (tensor.UnscaleSquarer) and one read-back for the flag and the norm. Unsharded only (a
	// sharded norm is the ranks' shards together).
	normWithCheck := clipping && eng.Shard() == nil && scaler.FusesNorm() && !t.opt.noFusedClip
	// The clip factor multiplied into the optimizer's own read of each gradient
	// (model.GradScaledStepper: AdamW on a device that takes it) rather than a pass of its own.
	fused, _ := t.optim.(model.GradScaledStepper)
	if fused != nil && (!fused.GradScaled() || t.opt.noFusedClip) {
		fused = nil
	}
	// The unscale folded into the step too (model.Scaler.FoldsInto; GODDP_UNSCALE_FOLD=0 not): the
	// check, and the norm with it, read the gradients without writing them back unscaled, and the
	// optimizer multiplies each by inv as it reads it, before the clip factor — the same bits.
	// Unsharded only, and only where nothing else reads the gradients in between: no clipping, or
	// the norm read with the check and the factor taken by the step.
	var unscaled model.UnscaledStepper
	if us, ok := scaler.FoldsInto(t.optim); ok && eng.Shard() == nil && (!clipping || normWithCheck && fused != nil) {
		unscaled = us
		t.unscaleFolded++
	}
	var localInf bool
	var checkedNorm, inv float32
	readBack := false // the check waited for the device: it is past this step's backward
	switch {
	case normWithCheck:
		var flag *tensor.Tensor
		if unscaled != nil {
			flag, inv = scaler.CheckDeferred(ps, true)
		} else {
			flag = scaler.UnscaleCheckNorm(ps)
		}
		localInf, checkedNorm = scaler.ReadCheckNorm(flag)
		localInf = localInf && scaler.Checks()
		readBack = true
	case unscaled != nil:
		var found *tensor.Tensor
		found, inv = scaler.CheckDeferred(ps, false)
		if scaler.Checks() {
			localInf, readBack = readFlag(dev, found), true
		}
	default:
		found := scaler.UnscaleCheckShard(ps, eng.Shard()) // sharded: the averaged part only
		if scaler.Checks() {
			localInf, readBack = readFlag(dev, found), true
		}
	}
	early := readBack && !stepEndWaits()
	if early {
		// The step's losses, made by its forwards, read now that the device is past them: no
		// wait of their own, and none at the step's end (below).
		dev.Download(ls.lossHost, ls.lossDev)
	}
	t.trace.Span("inf check", "compute", to, t.trace.Now(), nil) // the read-back: waits for the device
	infRanks, err := eng.RanksWith(ctx, localInf)
	if err != nil {
		return stepResult{}, fmt.Errorf("worker: step %d: %w", step, err)
	}
	anyInf := len(infRanks) > 0
	if anyInf && !scaler.Cfg.Enabled { // bf16: no scaler, no skipped step
		return stepResult{}, nonFinite(step, infRanks, t.env.WorldSize, scaler.Update(true))
	}
	res := stepResult{skipped: anyInf, gradNorm: math.NaN()}
	if !res.skipped {
		// Clipping: the norm (sharded: the global one), then the factor either multiplied into the
		// optimizer's own read of each gradient (fused) or applied by a pass over the gradients
		// first — the same bits either way.
		var coef float32
		if clipping {
			maxNorm := float32(max(cfg.Train.GradClip, 0))
			var n float32
			var err error
			switch {
			case normWithCheck: // GradNormCoef's norm, read with the flag
				n, coef = checkedNorm, model.ClipCoef(checkedNorm, maxNorm)
				if fused == nil && coef != 0 {
					dev.Scale(ps.Grad, coef) // ClipGradNorm's pass
				}
			case fused != nil:
				n, coef, err = eng.GradNormCoef(ctx, maxNorm)
			default:
				n, err = eng.ClipGradNorm(ctx, maxNorm)
			}
			if err != nil {
				return stepResult{}, fmt.Errorf("worker: step %d: %w", step, err)
			}
			res.gradNorm = float64(n)
		}
		switch {
		case unscaled != nil:
			unscaled.StepUnscaled(lr, inv, coef)
		case fused != nil:
			fused.StepScaled(lr, coef)
		default:
			t.optim.Step(lr)
		}
		if err := eng.GatherParams(ctx); err != nil { // sharded: every rank's updated segments
			return stepResult{}, fmt.Errorf("worker: step %d: %w", step, err)
		}
	}
	if err := scaler.Update(anyInf); err != nil {
		return stepResult{}, fmt.Errorf("worker: step %d: %w", step, err)
	}
	// BatchNorm running statistics: rank 0's, every step (broadcast_buffers). Not with
	// SyncBatchNorm: every rank computes the same statistics bit for bit (model's combine in rank
	// order), which the summary's buffers_sha256 of each rank shows.
	if bufs := modelBuffers(t.m); bufs != nil && t.syncBN == nil {
		if err := eng.BroadcastTensors(ctx, bufs); err != nil {
			return stepResult{}, fmt.Errorf("worker: step %d: buffers: %w", step, err)
		}
	}
	if !early { // the step's one wait (micro-steps make none), behind the optimizer
		dev.Sync()
		dev.Download(ls.lossHost, ls.lossDev)
	}
	// Otherwise (the default; GODDP_STEP_END_WAIT=1 waits, env.go) nothing waits for the optimizer
	// here: the host goes on to the step's records and the next step's first enqueues while the
	// device runs it (on a GPU, ~0.3 ms of host work a step to hide; docs/perf-gpu.md "The step's
	// end without a wait"). Whatever reads the updated weights on the host later — evaluation, checkpoints, the
	// replica check — reads them through the device's stream, which runs the optimizer first; the
	// next step's kernels queue behind it.
	k := len(ls.lossHost)
	for _, l := range ls.lossHost {
		res.loss += float64(l) / float64(k)
	}
	t.trace.Span("optimizer", "compute", to, t.trace.Now(), map[string]any{"skipped": res.skipped})
	return res, nil
}

// kernelProfiler is a device that times each kernel with events (cuda.Device): --profile-step.
type kernelProfiler interface {
	ProfileStart()
	ProfileStop() string
}

// profileSteps is how many steps --profile-step's profile covers (--profile-steps; at least 1).
func (t *Trainer) profileSteps() int { return max(1, t.opt.ProfileSteps) }

// startProfile starts --profile-step's kernel profile when step is the one it names (the device
// drained first, so the table holds the profiled steps' kernels only), into ls.prof.
func (t *Trainer) startProfile(ls *loopState, step int) {
	p, ok := t.dev.(kernelProfiler)
	if !ok || step+1 != t.opt.ProfileStep {
		return
	}
	t.dev.Sync()
	p.ProfileStart()
	ls.prof = p
}

// finishProfile prints the kernel table on stderr after the last profiled step (which has ended
// in a Sync).
func (t *Trainer) finishProfile(ls *loopState, step int) {
	if ls.prof == nil || step+1 != t.opt.ProfileStep+t.profileSteps()-1 {
		return
	}
	steps := fmt.Sprintf("step %d", step+1)
	if n := t.profileSteps(); n > 1 {
		steps = fmt.Sprintf("steps %d to %d", step+2-n, step+1)
	}
	fmt.Fprintf(os.Stderr, "ddptrain: rank %d, %s: kernel profile (device events around each kernel; the steps ran slower for them):\n%s",
		t.env.Rank, steps, ls.prof.ProfileStop())
	ls.prof = nil
}

// startMemoryPlot starts recording the device's allocations on the step --memory-plot draws and
// --memory-report breaks down by layer: the second of the run (the first allocates for good), on
// rank 0. nil on other steps.
func (t *Trainer) startMemoryPlot(step int) *observe.MemTimeline {
	if (t.opt.MemoryPlot != "" || t.opt.MemoryReport) && t.env.Rank == 0 && step == min(t.st.FirstStep()+1, t.total-1) {
		return observe.RecordMemory(t.dev)
	}
	return nil
}

// finishMemoryPlot stops the recording and draws it (nothing without one, or without --memory-plot).
func (t *Trainer) finishMemoryPlot(memRec *observe.MemTimeline, step int) error {
	if memRec == nil {
		return nil
	}
	memRec.Stop()
	if t.opt.MemoryPlot == "" {
		return nil
	}
	cfg := t.cfg
	title := fmt.Sprintf("%s, %s, micro-batch %d × %d: memory over step %d", t.spec.Summary(), cfg.Precision, cfg.Train.MicroBatch, cfg.Train.GradAccumSteps, step)
	if err := memRec.WritePNG(t.opt.MemoryPlot, title); err != nil {
		return err
	}
	t.log.Info("memory plot written", "path", t.opt.MemoryPlot, "events", memRec.Events())
	return nil
}

// checkMemory is --check-leaks and, after the run's second step, --memory-report on rank 0 (with
// the step's own blocks at its peak by layer, from memRec, the step's recording).
// A leak is memory that grows from one step's end to the next: the baseline is what is allocated
// at the end of the run's first step, which every later step must end at. Not the memory before
// the first step: a model keeps its last Forward's logits until the next Forward replaces them
// (Predict reads them; the MLP's and the ResNet's, 5 KiB on MNIST), and the first step allocates
// what a run then holds for good.
func (t *Trainer) checkMemory(step int, leakBase *int64, memRec *observe.MemTimeline) error {
	if t.opt.CheckLeaks {
		if *leakBase < 0 {
			*leakBase = t.dev.Stats().Allocated
		} else if err := observe.CheckLeaks(t.dev, *leakBase, step); err != nil {
			return err
		}
	}
	if t.opt.MemoryReport && step == t.st.FirstStep()+1 && t.env.Rank == 0 {
		fmt.Fprint(os.Stderr, observe.MemoryReportDDP(t.dev, t.ps, t.optim, t.ddpMemory()))
		if memRec != nil {
			fmt.Fprint(os.Stderr, observe.PeakReport(memRec, step+1, 8))
		}
	}
	return nil
}

// ddpMemory is the engine's rows of the memory report under ddp.shard_optimizer (nil unsharded).
func (t *Trainer) ddpMemory() *observe.DDPMemory {
	sh := t.eng.Shard()
	if sh == nil {
		return nil
	}
	now, unsharded := t.eng.HostBufferBytes()
	path := "host copies"
	switch {
	case t.eng.GradShardInPlace():
		path = "in place"
	case t.eng.Staged():
		path = "staged"
	}
	return &observe.DDPMemory{GradShardElems: sh.N(), HostBuffers: now, HostUnsharded: unsharded, Path: path}
}

// stepRecord is the step just done, for the observers; with logNow it closes the metrics window
// and starts the next.
func (t *Trainer) stepRecord(ls *loopState, res stepResult, lr float32, stepTime time.Duration, logNow bool) observe.StepRecord {
	st := &t.st
	tokensPerSample := t.m.Input().Tokens // 0 for float features
	commNow, hidden := t.eng.CommStats()
	rec := observe.StepRecord{Step: st.Step, Epoch: st.Step / t.loader.StepsPerEpoch(), Last: st.Step == t.total,
		Seconds: stepTime.Seconds(), Samples: t.samplesPerStep(), TokensPerSample: tokensPerSample,
		Loss: res.loss, LR: lr, LossScale: float64(t.scaler.Scale()), GradNorm: res.gradNorm, Skipped: res.skipped, SkippedTotal: st.Skipped,
		Mem: t.dev.Stats(), CommSeconds: commNow, CommHiddenFraction: hidden}
	rec.WireSent, rec.WireRecv = wireBytes(t.groups)
	if logNow {
		w := &ls.window
		rec.Window = &observe.Window{Steps: w.steps, Seconds: time.Since(w.start).Seconds(), Data: w.data, CommSeconds: commNow - w.commAt}
		w.start, w.steps, w.data, w.commAt = time.Now(), 0, 0, commNow
	}
	return rec
}

// samplesPerStep is the global batch: micro_batch × grad_accum_steps × world size.
func (t *Trainer) samplesPerStep() int {
	return t.cfg.Train.MicroBatch * t.cfg.Train.GradAccumSteps * t.env.WorldSize
}

// afterStep is what comes every so many steps, until the last: the replica check
// (ddp.check_every), an evaluation (train.eval_every; 0 is each epoch's end) and a checkpoint
// (checkpoint.every).
func (t *Trainer) afterStep(ctx context.Context) error {
	cfg, st := t.cfg, &t.st
	if cfg.DDP.CheckEvery > 0 && st.Step%cfg.DDP.CheckEvery == 0 {
		if _, err := t.eng.CheckReplicas(ctx, st.Step); err != nil {
			return err
		}
	}
	evalEvery := cfg.Train.EvalEvery
	if evalEvery == 0 { // train.eval_every 0: at each epoch's end
		evalEvery = t.loader.StepsPerEpoch()
	}
	if st.Step%evalEvery == 0 && st.Step < t.total {
		te := time.Now()
		if err := t.eng.Settle(); err != nil { // evaluate all-reduces on the main group
			return err
		}
		ev, err := evaluate(ctx, t.m, t.dev, t.evalSet, cfg, t.env, t.group)
		if err != nil {
			return err
		}
		er := observe.EvalRecord{Step: st.Step, Epoch: st.Step / t.loader.StepsPerEpoch(), Loss: ev.Loss, Samples: ev.Samples,
			Seconds: time.Since(te).Seconds()}
		if t.m.Classifier() { // a language model's loss is in nats per token, and it has no accuracy
			er.Accuracy = observe.Float(ev.Accuracy)
		}
		t.obs.Eval(er)
	}
	if cfg.Checkpoint.Dir != "" && cfg.Checkpoint.Every > 0 && st.Step%cfg.Checkpoint.Every == 0 && st.Step < t.total {
		// Under ddp.shard_optimizer every rank sends its optimizer shard to the writers first
		// (collectives), before the writer's own decision to skip a checkpoint, so the ranks'
		// collectives stay in step.
		shards, err := t.gatherOptimShards(ctx)
		if err != nil {
			return err
		}
		if writing, busy := st.Writing(t.checkpointPatience()); busy {
			// The disk is much slower than the interval: skip this one rather than wait longer,
			// which would hold this rank out of the next collective until its peers time out.
			t.ckptSkipped++
			t.log.Warn("checkpoint skipped: the previous one is still being written", "step", st.Step,
				"writing_step", writing, "skipped_so_far", t.ckptSkipped)
			t.prom.CheckpointSkipped()
			return nil
		}
		if err := t.saveCheckpoint(shards); err != nil {
			return err
		}
	}
	return nil
}

// finish is the run's end: the last evaluation, the replica check whose hash is the summary's
// param_sha256, the summary, the last checkpoint (which carries the summary), the observers'
// summary and the trace file.
func (t *Trainer) finish(ctx context.Context, ls *loopState) (*Result, error) {
	cfg, env, st := t.cfg, t.env, &t.st
	te := time.Now()
	if err := t.eng.Settle(); err != nil { // evaluate all-reduces on the main group
		return nil, err
	}
	ev, err := evaluate(ctx, t.m, t.dev, t.evalSet, cfg, env, t.group)
	if err != nil {
		return nil, err
	}
	// The end of training is an evaluation: its eval line too (afterStep's stop before the last
	// step), so a 3-epoch run has 3 and `ddpbench plot` draws the last.
	er := observe.EvalRecord{Step: st.Step, Epoch: st.Step / t.loader.StepsPerEpoch(), Loss: ev.Loss, Samples: ev.Samples,
		Seconds: time.Since(te).Seconds()}
	if t.m.Classifier() {
		er.Accuracy = observe.Float(ev.Accuracy)
	}
	t.obs.Eval(er)
	hash, err := t.eng.CheckReplicas(ctx, st.Step)
	if err != nil {
		return nil, err
	}
	commSec, hidden := t.eng.CommStats()
	secs := time.Since(t.wall).Seconds()
	trained := st.Step - st.FirstStep()
	sum := &observe.SummaryMetrics{
		Steps: st.Step, FinalLoss: ls.lastLoss, EvalLoss: ev.Loss, PeakMemoryBytes: t.dev.Stats().Peak,
		SkippedSteps: st.Skipped, Precision: string(cfg.Precision), WorldSize: env.WorldSize, Rank: env.Rank,
		WallSeconds: secs, ParamSHA256: hash, BuffersSHA256: buffersHash(t.m), MicroBatch: cfg.Train.MicroBatch, GradAccumSteps: cfg.Train.GradAccumSteps,
		CommSeconds: commSec, CommHiddenFraction: hidden,
	}
	rate := float64(trained*t.samplesPerStep()) / secs
	if t.m.Classifier() {
		sum.EvalAccuracy = observe.Float(ev.Accuracy)
	} else {
		sum.TokensPerSec = rate * float64(t.m.Input().Tokens)
	}
	sum.SamplesPerSec = rate
	if cfg.Checkpoint.Dir != "" { // the last checkpoint carries the summary: a run started again after this one prints it
		if st.Summary, err = json.Marshal(sum); err != nil {
			return nil, fmt.Errorf("checkpoint: encoding the summary: %w", err)
		}
		shards, err := t.gatherOptimShards(ctx) // every rank: collectives
		if err != nil {
			return nil, err
		}
		if err := t.saveCheckpoint(shards); err != nil {
			return nil, err
		}
		if err := st.WaitWrite(); err != nil {
			return nil, err
		}
	}
	t.obs.Summary(*sum)
	if t.trace != nil {
		if err := t.trace.WriteFile(observe.RankPath(t.opt.TracePath, env.Rank)); err != nil {
			return nil, err
		}
	}
	doneKV := []any{"steps", st.Step, "eval_loss", fmt.Sprintf("%.4f", ev.Loss)}
	if t.m.Classifier() {
		doneKV = append(doneKV, "eval_accuracy", fmt.Sprintf("%.4f", ev.Accuracy))
	}
	t.log.Info("done", append(doneKV, "param_sha256", hash[:16], "wall_s", fmt.Sprintf("%.1f", secs))...)
	return sum, nil
}

// saveCheckpoint checkpoints the run's state now, on the ranks that write checkpoints
// (checkpoint.IsWriter); it returns once the snapshot is taken, the write goes on in the
// background (checkpoint.State.Save). shards is gatherOptimShards' (nil unsharded), which every
// rank calls first.
func (t *Trainer) saveCheckpoint(shards *checkpoint.OptimShards) error {
	t.st.Loader = t.loader.State()
	if !checkpoint.IsWriter(t.cfg.Checkpoint.PerHost, t.env.Rank, t.env.LocalRank) {
		return nil
	}
	return t.st.Save(t.cfg, t.env.WorldSize, t.ps, t.optim, shards, t.scaler, t.log)
}

// gatherOptimShards: under ddp.shard_optimizer every rank joins in gathering the f32 master
// weights whole (the writers save them as model.safetensors; under ddp.shard_master into a host
// buffer, OptimShards.Master, which the other ranks drop at once) and in sending its optimizer shard,
// encoded as its shard file, to the writers (ddp's GatherShardFiles: the all-gather's ring, in
// which only the writers collect the files; the others pass each on and hold one at most), so
// each writer's checkpoint holds every rank's shard file (checkpoint/shards.go). Unsharded it
// returns nil: the optimizer's own state is whole.
func (t *Trainer) gatherOptimShards(ctx context.Context) (*checkpoint.OptimShards, error) {
	sh := t.eng.Shard()
	if sh == nil {
		return nil, nil
	}
	var master []float32 // ddp.shard_master: the master gathered whole on the host, for the writers
	if t.ps.MasterSharded() {
		var err error
		if master, err = t.eng.MasterHost(ctx); err != nil {
			return nil, fmt.Errorf("worker: checkpoint of step %d: %w", t.st.Step, err)
		}
	} else if err := t.eng.GatherMaster(ctx); err != nil { // the weights the writer saves, whole
		return nil, fmt.Errorf("worker: checkpoint of step %d: %w", t.st.Step, err)
	}
	world, rank := t.env.WorldSize, t.env.Rank
	var state []model.NamedTensor
	for _, s := range t.optim.State() {
		v := tensor.ToHost(s.T) // packed: the shard's elements in slab order
		state = append(state, model.NamedTensor{Name: s.Name, DType: tensor.F32, Shape: []int{len(v)}, Data: model.F32Bytes(v)})
	}
	mine, err := checkpoint.EncodeOptimShard(state, rank, world)
	if err != nil {
		return nil, fmt.Errorf("worker: checkpoint of step %d: rank %d's optimizer shard: %w", t.st.Step, rank, err)
	}
	keep := shardFileKeepers(t.cfg.Checkpoint.PerHost, world, t.env.LocalWorldSize)
	writer := checkpoint.IsWriter(t.cfg.Checkpoint.PerHost, rank, t.env.LocalRank)
	if keep[rank] != writer {
		// Every rank must agree on who collects the files; a writer left out would save nil.
		lw := max(1, t.env.LocalWorldSize)
		return nil, fmt.Errorf("worker: checkpoint of step %d: rank %d has LOCAL_RANK=%d, not RANK %% LOCAL_WORLD_SIZE = %d %% %d = %d: the ranks are not numbered host by host",
			t.st.Step, rank, t.env.LocalRank, rank, lw, rank%lw)
	}
	files, err := t.eng.GatherShardFiles(ctx, mine, keep)
	if err != nil {
		return nil, fmt.Errorf("worker: checkpoint of step %d: %w", t.st.Step, err)
	}
	if !writer {
		return nil, nil
	}
	l := checkpoint.ShardLayout{WorldSize: world, BucketCapMB: t.cfg.DDP.BucketCapMB, N: t.ps.N}
	for r := range world {
		l.Ranks = append(l.Ranks, ddp.PlanShard(t.ps, t.cfg.DDP.BucketCapMB, world, r).Ranges)
	}
	return &checkpoint.OptimShards{Layout: l, Files: files, Master: master}, nil
}

// shardFileKeepers says, for each rank of a world of world ranks, whether it writes checkpoints
// (checkpoint.IsWriter) and so keeps every rank's optimizer shard file when they are gathered.
// Every rank computes it alike from the job's shape: ranks are numbered host by host,
// localWorld (LOCAL_WORLD_SIZE) to a host, so rank r's local rank is r % localWorld.
func shardFileKeepers(perHost bool, world, localWorld int) []bool {
	keep := make([]bool, world)
	for r := range keep {
		keep[r] = checkpoint.IsWriter(perHost, r, r%max(1, localWorld))
	}
	return keep
}

// wireBytes are the bytes the groups have sent and received, all collectives so far.
func wireBytes(groups []*allreduce.Group) (sent, recv int64) {
	for _, g := range groups {
		st := g.Stats()
		sent += st.BytesSent
		recv += st.BytesRecv
	}
	return sent, recv
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

// checkpointPatience is how long a checkpoint due while the previous one is still being written
// waits for it before it is skipped: half the collective timeout, which the peers spend waiting
// in the next collective meanwhile; without peers, as long as it takes.
func (t *Trainer) checkpointPatience() time.Duration {
	if t.env.WorldSize <= 1 {
		return time.Duration(math.MaxInt64)
	}
	d := t.cfg.DDP.Timeout.D
	if d <= 0 {
		d = 30 * time.Second // allreduce's default (link.DefaultTimeout)
	}
	return d / 2
}
