package worker

// trainer.go: a training process in three calls. New opens everything a run needs, in order;
// (*Trainer).Run (loop.go) trains; Close releases what New opened, in reverse order, once. A New
// that fails partway closes what it had opened before returning. Nothing here exits the process:
// failures are errors, and cmd/ddptrain maps them to exit codes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/data"
	"github.com/goddp/goddp/worker/observe"
)

// Options are ddptrain's command-line switches beyond the config, and the test hooks.
type Options struct {
	Device       string // "cpu" (default) or "cuda"
	MetricsPath  string // --metrics: JSON lines
	TracePath    string // --trace: Chrome trace events
	MemoryReport bool   // --memory-report
	CheckLeaks   bool   // --check-leaks
	MemoryPlot   string // --memory-plot: PNG of device memory over one step (observe.MemTimeline)
	// ProfileStep (--profile-step N), when > 0, times every kernel of the run's Nth step (counted
	// from 1, as the logs count) with device events and prints the table per kernel name on
	// stderr, each rank its own: a device with a kernel profile only (cuda). Slower than an
	// unprofiled step; the steps around it are not.
	ProfileStep int
	// ProfileSteps (--profile-steps K, 0 or 1: one) makes that profile cover K steps from
	// ProfileStep on, so its table of gaps between kernels also holds the time between steps (the
	// host's work after a step's last wait, before the next step's first kernel).
	ProfileSteps int
	// ResumeFrom (--resume-from) is a checkpoint step directory to resume from instead of the
	// newest in checkpoint.dir (resumePoint says when checkpoint.dir's newest is taken anyway).
	// Every rank must be able to read it.
	ResumeFrom string
	// MetricsListen (--metrics-port N is ":N") is where this process serves Prometheus metrics,
	// host:port; it overrides metrics.listen. Rank r of a host adds its LOCAL_RANK to the port
	// (observe.ServePrometheus).
	MetricsListen string
	Logger        *slog.Logger

	// Test hooks: nil in production. cmd/ddptrain sets them from DDP_FAIL_AT_STEP and
	// DDP_INJECT_INF_STEP/RANK for the restart and loss-scaler tests.

	// noFusedClip clips with a pass over the gradients even where the optimizer could take the
	// factor in its step (tests: the two give the same bits).
	noFusedClip bool

	// FaultHook, when set, is called before each step; an error it returns ends the run (Run
	// returns it wrapped, so errors.Is finds it), after which Close releases everything as after
	// any other failure.
	FaultHook func(step int) error
	// InjectInf, when set, is asked after each step's all-reduce whether to put +Inf into this
	// rank's first gradient element (tests of the loss-scaler agreement and bf16's error).
	InjectInf func(step int) bool
	// SlowCheckpoint, when set, is called by the background checkpoint writer before each write
	// (tests of a slow disk: checkpoint.State.BeforeWrite).
	SlowCheckpoint func(step int)
	// wrapModel, when set, wraps the model the run builds (tests: a planted leak).
	wrapModel func(model.Model) model.Model
}

// Result is what a run ends with (also the metrics summary).
type Result = observe.SummaryMetrics

// Trainer is one training process, set up: the process group, the device, the data, the model
// with its optimizer and loss scaler, the DDP engine, the data loader, metrics and progress, the
// state resumed from a checkpoint. It trains once (Run); Close releases it.
type Trainer struct {
	cfg  *Config // the trainer's own copy: batch resolved, data.path and checkpoint.dir filled in
	opt  Options
	env  Env
	log  *slog.Logger
	wall time.Time // when New started: the summary's wall_seconds

	group   *allreduce.Group
	syncBN  *ddp.StatReduce // model.sync_batchnorm over world > 1: BN statistics reduced over the ranks
	dev     tensor.Device
	evalSet data.Dataset // the training set is the loader's
	m       model.Model
	spec    model.Spec // ModelSpec(cfg), derived once in New: m's description
	ps      *model.Params
	optim   Optimizer
	scaler  *Scaler
	trace   *observe.Trace // nil without --trace
	eng     *ddp.Engine
	st      checkpoint.State
	loader  *data.Loader
	total   int // optimizer steps of the whole run
	sched   model.Schedule
	metrics *observe.MetricsWriter // nil without --metrics
	prom    *observe.Prometheus    // nil without metrics.listen / --metrics-port
	prog    *observe.Progress
	obs     observe.Observers // the three above: what the loop reports to
	in      *inputs
	ahead   *inputs // data.upload_ahead: the next micro-batch's buffers (loop.go), else nil
	// aheadTaken counts the micro-steps that took their batch uploaded ahead (tests).
	aheadTaken int
	// unscaleFolded counts the steps whose check left the unscale to the optimizer (tests).
	unscaleFolded int
	// gpuAgree: the ranks' agreement that they share one GPU (sharedgpu.go); nil before
	// startEngine makes it, or where it does not apply.
	gpuAgree *gpuAgreement
	groups   []*allreduce.Group // the main group and the channels: their bytes on the wire

	ckptSkipped int // checkpoints skipped while the previous one was still being written

	closers []func() error // what New opened, in order
	closed  bool
	ran     bool
}

// New sets up a run of cfg for this process (RANK, WORLD_SIZE, ... from the environment: Env):
// it joins the process group, opens the device, loads the data, builds the model, optimizer and
// scaler, resolves the batch (searching it for micro_batch: auto), resumes from the newest
// checkpoint and makes every replica identical. cfg is not changed. ctx cancels the setup's
// blocking calls (the group's rendezvous, the collectives). Each step below registers what it
// opens with onClose, so a failure partway closes what was opened, in reverse order.
func New(ctx context.Context, cfg *Config, opt Options) (_ *Trainer, err error) {
	t := &Trainer{opt: opt, wall: time.Now()}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	if err := t.readEnv(cfg); err != nil {
		return nil, err
	}
	gcfg, err := t.joinGroup(ctx)
	if err != nil {
		return nil, err
	}
	if t.env.Rank == 0 {
		t.log.Info("setting up: opening the device, loading the data, building the model", "model", t.cfg.Model.Kind,
			"data", string(t.cfg.Data.Kind), "data_path", t.cfg.Data.Path)
	}
	trainSet, err := t.buildModel()
	if err != nil {
		return nil, err
	}
	if err := t.fitMemory(ctx, trainSet); err != nil {
		return nil, err
	}
	if err := t.startEngine(ctx, gcfg); err != nil {
		return nil, err
	}
	resumed, err := t.resumeOrInit(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.openLoader(trainSet, resumed); err != nil {
		return nil, err
	}
	if resumed != "" && t.st.Step >= t.total { // before the outputs: the finished run's metrics file stays as it was
		return nil, &FinishedError{Step: t.st.Step, Total: t.total, Path: resumed, Summary: savedSummary(&t.st, t.log)}
	}
	if err := t.openOutputs(); err != nil {
		return nil, err
	}
	return t, nil
}

// readEnv reads the environment (Env), starts the launcher's heartbeat, and takes the trainer's
// own copy of cfg with data.path filled in.
func (t *Trainer) readEnv(cfg *Config) error {
	log := t.opt.Logger
	if log == nil {
		log = slog.Default()
	}
	env, err := EnvFromOS()
	if err != nil {
		return err
	}
	log = log.With("rank", env.Rank)
	if env.HeartbeatFD >= 0 {
		t.onClose(startHeartbeat(env.HeartbeatFD))
	}
	cfg = cfg.Clone()
	if err := fillDataPath(cfg); err != nil {
		return err
	}
	t.cfg, t.env, t.log = cfg, env, log
	return nil
}

// joinGroup joins the process group (one of its own for a single process) and, unless
// micro_batch is auto (fitMemory searches it), resolves the batch for the world size. It returns
// the main group's config, which the channels copy.
func (t *Trainer) joinGroup(ctx context.Context) (allreduce.Config, error) {
	cfg, env := t.cfg, t.env
	var group *allreduce.Group
	var gcfg allreduce.Config
	var err error
	if env.WorldSize > 1 {
		gcfg, err = allreduce.ConfigFromEnv()
		if err != nil {
			return gcfg, err
		}
		gcfg.Logger = t.log
		gcfg.Timeout = cfg.DDP.Timeout.D // 0: allreduce's default
		group, err = allreduce.NewGroup(ctx, gcfg)
		if err != nil && env.Rank == 0 && errors.Is(err, syscall.EADDRINUSE) {
			return gcfg, &MasterPortTakenError{Addr: gcfg.MasterAddr, Err: err}
		}
		if err != nil {
			return gcfg, fmt.Errorf("worker: joining the process group: %w", err)
		}
	} else {
		group, err = allreduce.NewGroup(ctx, allreduce.Config{Rank: 0, WorldSize: 1})
		if err != nil {
			return gcfg, err
		}
	}
	t.group = group
	t.onClose(group.Close)
	if !cfg.Train.MicroBatchAuto { // auto: resolved by the search (fitMemory)
		b, err := cfg.Train.ResolveBatch(env.WorldSize)
		if err != nil {
			return gcfg, err
		}
		cfg.Train = cfg.Train.WithBatch(b)
	}
	return gcfg, nil
}

// buildModel opens the device, loads the data sets (returning the training set, which the
// loader takes later) and builds the model, its spec, the optimizer and the loss scaler.
func (t *Trainer) buildModel() (data.Dataset, error) {
	cfg := t.cfg
	dev, err := OpenDevice(t.opt.Device, t.env.LocalRank)
	if err != nil {
		return nil, err
	}
	t.dev = dev
	if _, ok := dev.(kernelProfiler); t.opt.ProfileStep > 0 && !ok {
		return nil, fmt.Errorf("--profile-step: the %s device has no kernel profile (a cuda device has)", dev.Name())
	}
	if err := flashForwardRows(dev, cfg.Model.FlashForwardRows); err != nil {
		return nil, err
	}
	spec, err := ModelSpec(cfg) // the one derivation: the model, the data, the checkpoints and the logs use it
	if err != nil {
		return nil, err
	}
	t.spec, t.st.Spec = spec, spec
	trainSet, evalSet, err := loadData(cfg, spec)
	if err != nil {
		return nil, err
	}
	for _, ds := range []data.Dataset{trainSet, evalSet} {
		if c, ok := ds.(io.Closer); ok { // token shards: unmapped at the end
			t.onClose(c.Close)
		}
	}
	t.evalSet = evalSet
	m, err := model.New(dev, spec, uint64(cfg.Seed))
	if err != nil {
		return nil, err
	}
	if t.opt.wrapModel != nil {
		m = t.opt.wrapModel(m)
	}
	t.m = m
	t.onClose(func() error { m.Free(); return nil })
	ps := m.Params()
	t.ps = ps
	// ddp.shard_optimizer: the optimizer keeps this rank's shard only (ddp/shard.go); the engine
	// below plans the same shard from the same buckets.
	shard := optimizerShardFor(cfg, t.env, ps)
	opt2, err := buildOptimizer(cfg, ps, shard)
	if err != nil {
		return nil, err
	}
	t.optim = opt2
	t.onClose(func() error { opt2.Free(); return nil })
	if t.shardMaster(shard) { // ddp.shard_master: the f32 master of the shard only (model/master_shard.go)
		if err := ps.ShardMaster(shard); err != nil {
			return nil, err
		}
		dev.EmptyCache() // the whole slab's block goes back
		if _, host := dev.(tensor.HostMemory); !host && t.env.Rank == 0 {
			t.log.Warn("ddp.shard_master: on with a device where it is not the default (the f32 master sharded on " + dev.Name() + ": its own tests ran on a GPU, the whole -tags cuda suite not yet)")
		}
	}
	scaler, err := buildScaler(dev, cfg)
	if err != nil {
		return nil, err
	}
	t.scaler = scaler
	t.onClose(func() error { scaler.Free(); return nil })
	return trainSet, nil
}

// fitMemory is the memory budget: micro_batch: auto searched for it (autobatch.go) before any
// state is loaded, or train.memory_budget set as the device's limit.
func (t *Trainer) fitMemory(ctx context.Context, trainSet data.Dataset) error {
	cfg := t.cfg
	if cfg.Train.MicroBatchAuto {
		b, err := autoMicroBatch(ctx, t.dev, cfg, t.m, t.optim, t.scaler, t.group, trainSet.Len()/t.env.WorldSize, t.log)
		if err != nil {
			return err
		}
		cfg.Train = cfg.Train.WithBatch(b)
	} else if cfg.Train.MemoryBudget.Bytes > 0 {
		t.dev.SetLimit(cfg.Train.MemoryBudget.Bytes)
	}
	return nil
}

// startEngine opens the trace (--trace), the extra channels (ddp.channels) and the DDP engine.
func (t *Trainer) startEngine(ctx context.Context, gcfg allreduce.Config) error {
	cfg := t.cfg
	if t.opt.TracePath != "" {
		t.trace = observe.NewTrace(t.env.Rank)
	}
	channels, err := allreduce.OpenChannels(ctx, t.group, gcfg, cfg.DDP.Channels)
	if err != nil {
		return err
	}
	t.groups = append([]*allreduce.Group{t.group}, channels...)
	t.onClose(func() error {
		var errs []error
		for _, g := range channels {
			errs = append(errs, g.Close())
		}
		return errors.Join(errs...)
	})
	if err := t.syncBatchNorm(ctx, cfg, t.env, t.m, t.group, gcfg); err != nil {
		return err
	}
	comms := asComms(t.groups)
	if (cfg.DDP.Hierarchical || t.deviceAcrossHosts()) && t.group.Size() > 1 {
		if comms, err = t.hierarchies(ctx, gcfg, t.groups); err != nil {
			return err
		}
	}
	dopts := ddp.Options{BucketCapMB: cfg.DDP.BucketCapMB, Wire: wireOf(cfg), Logger: t.log, Channels: comms[1:],
		ShardOptimizer: model.ShardOf(t.optim) != nil, // the shard the optimizer was built on
		OverlapGather:  t.overlapGather(),
		HostStaging:    t.wantsDeviceReduce()} // no pinned staging: UseDevice takes the device path (intrahost.go)
	if t.trace != nil { // not a nil *Trace in the interface
		dopts.Tracer = t.trace
	}
	eng := ddp.New(t.ps, comms[0], dopts)
	eng.SetBuffers(modelBuffers(t.m)) // the replica check covers the BatchNorm running statistics
	t.eng = eng
	t.onClose(func() error { eng.Close(); return nil })
	if err := t.agreeSharedGPU(ctx); err != nil { // for the auto values below (sharedgpu.go)
		return err
	}
	if err := t.intraHostDevice(ctx, eng); err != nil {
		return err
	}
	if err := t.intraHostCopies(ctx, eng); err != nil {
		return err
	}
	if err := t.shardGatherDevice(ctx, eng); err != nil {
		return err
	}
	return t.shardReduceDevice(ctx, eng)
}

// resumeOrInit resumes from the newest checkpoint any rank has (or --resume-from's), or else
// starts from model.init_from's weights (rank 0 reads them), and then makes every replica
// identical: rank 0's parameters, optimizer state and buffers broadcast to all. It returns the
// checkpoint resumed from, "" for a fresh start.
func (t *Trainer) resumeOrInit(ctx context.Context) (string, error) {
	cfg, env, log := t.cfg, t.env, t.log
	st := &t.st
	if b, ok := t.m.(model.Buffered); ok {
		st.Buffers = b.Buffers()
	}
	st.BeforeWrite = t.opt.SlowCheckpoint
	t.onClose(st.WaitWrite) // a checkpoint still being written (checkpoint.State.Save) lands before the process goes
	if cfg.Checkpoint.Dir != "" {
		cfg.Checkpoint.Dir = checkpoint.ExpandDir(cfg.Checkpoint.Dir, env.NodeRank)
		// Every rank ends up seeing the newest checkpoint any rank has (hosts without a shared
		// filesystem; a no-op when they share one).
		if err := checkpoint.Sync(ctx, t.group, cfg.Checkpoint.Dir, env.Rank, env.LocalRank, log); err != nil {
			return "", err
		}
	}
	resumed, where, err := resumePoint(cfg, t.opt.ResumeFrom, env, log)
	if err != nil {
		return "", err
	}
	load := func() error { return t.loadState(ctx, resumed, where) }
	if resumed != "" || cfg.Model.InitFrom != "" {
		err = t.loadWhole(load) // on the whole master, when ddp.shard_master shards it
	} else {
		err = load()
	}
	return resumed, err
}

// loadState loads the checkpoint resumed from (resumed, found where), or else model.init_from's
// weights on rank 0, and broadcasts rank 0's parameters, optimizer state and buffers to every
// rank. A fresh start loads nothing and broadcasts as well.
func (t *Trainer) loadState(ctx context.Context, resumed, where string) error {
	cfg, env, log, ps := t.cfg, t.env, t.log, t.ps
	st := &t.st
	if resumed != "" {
		if err := st.Restore(resumed, where, env.WorldSize, cfg, ps, t.optim, t.scaler, log); err != nil {
			return err
		}
		log.Info("resumed from checkpoint", "path", resumed, "step", st.Step)
		if cfg.Model.InitFrom != "" {
			log.Info("model.init_from is not read: the checkpoint's weights supersede it", "init_from", cfg.Model.InitFrom, "run_started_from", st.InitFrom)
		}
	}
	if resumed == "" && cfg.Model.InitFrom != "" { // rank 0 reads the weights; the broadcast below
		st.InitFrom = cfg.Model.InitFrom
		if env.Rank == 0 {
			if err := checkpoint.LoadInitFrom(cfg.Model.InitFrom, st.Spec, ps, log); err != nil {
				return err
			}
		}
	}
	optState := optimizerTensors(t.optim)
	if model.ShardOf(t.optim) != nil { // each rank's own shard: zeros, or its part of the checkpoint's whole state
		optState = nil
	}
	weights := []*tensor.Tensor{ps.Data}
	if ps.MasterSharded() { // a fresh start: every rank's shard of the master drawn from the same seed
		weights = nil
	}
	if err := t.eng.BroadcastTensors(ctx, append(append(weights, optState...), modelBuffers(t.m)...)); err != nil {
		return err
	}
	if resumed == "" && cfg.Model.InitFrom != "" {
		st.InitSHA256 = ps.SHA256()
	}
	return nil
}

// loadWhole runs load — a resume or model.init_from, and the broadcast of rank 0's weights that
// follows — on a whole f32 master when ddp.shard_master keeps it sharded: the master is made whole
// (UnshardMaster: the held values, zeros elsewhere, which load overwrites) and sharded again on
// the same shard after, so loading, broadcasting and InitSHA256 are the unsharded code. The whole
// slab exists only during setup, before the first step (micro_batch: auto has searched with the
// master sharded already); its block goes back after.
func (t *Trainer) loadWhole(load func() error) error {
	sh := t.ps.UnshardMaster()
	if sh == nil {
		return load()
	}
	err := load()
	if e := t.ps.ShardMaster(sh); err == nil {
		err = e
	}
	t.dev.EmptyCache()
	return err
}

// openLoader starts the training data loader where the state says (the resumed position), and
// sets the run's length and learning-rate schedule.
func (t *Trainer) openLoader(trainSet data.Dataset, resumed string) error {
	cfg, env := t.cfg, t.env
	loader, err := data.NewLoader(trainSet, data.LoaderConfig{
		MicroBatch: cfg.Train.MicroBatch, Accum: cfg.Train.GradAccumSteps, Rank: env.Rank, World: env.WorldSize, Seed: uint64(cfg.Seed),
		Shuffle: cfg.Data.Shuffle, Workers: cfg.Data.Workers, Prefetch: cfg.Data.Prefetch, Start: t.st.Loader,
		Alloc: batchAllocator(t.dev), // pinned host memory on a GPU (pinned.go)
	})
	if err != nil {
		return err
	}
	t.loader = loader
	t.onClose(func() error { loader.Close(); return nil })
	t.total = totalSteps(cfg, loader.StepsPerEpoch())
	t.sched, err = buildSchedule(cfg, t.total)
	return err
}

// openOutputs opens what the run reports to, the observers: the metrics file (--metrics), the
// Prometheus server (metrics.listen, --metrics-port) and the progress display; and the device
// buffers the batches are uploaded into.
func (t *Trainer) openOutputs() error {
	cfg, env := t.cfg, t.env
	var err error
	t.metrics, err = observe.OpenMetrics(t.opt.MetricsPath, env.Rank)
	if err != nil {
		return err
	}
	t.onClose(t.metrics.Close)
	listen := cfg.Metrics.Listen
	if t.opt.MetricsListen != "" {
		listen = t.opt.MetricsListen
	}
	if listen != "" {
		t.prom, err = observe.ServePrometheus(listen, env.Rank, env.LocalRank, env.RestartCount, t.log)
		if err != nil {
			return err
		}
		t.onClose(t.prom.Close)
	}
	t.prog = observe.NewProgress(t.total, env.Rank, env.ProgressFD)
	t.onClose(func() error { t.prog.Finish(); return nil })
	if t.metrics != nil { // not nil pointers in the interface: the fan-out skips only nil entries
		t.obs = append(t.obs, t.metrics)
	}
	if t.prom != nil {
		t.obs = append(t.obs, t.prom)
	}
	t.obs = append(t.obs, t.prog)
	t.in = newInputs(t.dev, t.m.Input(), cfg.Train.MicroBatch)
	if uploadAhead(cfg, t.dev) {
		t.ahead = newInputs(t.dev, t.m.Input(), cfg.Train.MicroBatch)
	}
	t.onClose(func() error { // the loop swaps the two: free whichever each holds at the end
		t.in.free(t.dev)
		if t.ahead != nil {
			t.ahead.free(t.dev)
		}
		return nil
	})
	return nil
}

// resumePoint says which checkpoint a run resumes from, and where it was found (for messages):
// "" when the run starts afresh. Without --resume-from it is the newest complete checkpoint in
// checkpoint.dir. With it, it is that step directory, unless checkpoint.dir holds a newer
// checkpoint: on a restart of this job (DDP_RESTART_COUNT > 0) that one is the job's own progress
// since, and is taken; otherwise it belongs to another run, and the resume is refused, since the
// two runs' checkpoints would mix in checkpoint.dir (pruning, and the next restart's choice).
func resumePoint(cfg *Config, from string, env Env, log *slog.Logger) (path, where string, err error) {
	latest := ""
	if dir := cfg.Checkpoint.Dir; dir != "" {
		// checkpoint.Resume: the newest complete one; when every one is broken, an error naming
		// them, unless checkpoint.fresh_if_broken (then they are set aside and the run starts).
		if latest, err = checkpoint.Resume(dir, cfg.Checkpoint.FreshIfBroken, log); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
	}
	inDir := "checkpoint.dir " + cfg.Checkpoint.Dir
	if from == "" {
		return latest, inDir, nil
	}
	if err := checkpoint.Verify(from); err != nil {
		if paths, _, _ := checkpoint.StepDirs(from); len(paths) > 0 {
			return "", "", fmt.Errorf("worker: --resume-from %s is a checkpoint directory, not a checkpoint: name one of its step directories, e.g. %s", from, paths[0])
		}
		return "", "", fmt.Errorf("worker: --resume-from: %w", err)
	}
	fromStep, err := checkpoint.StepOf(from)
	if err != nil {
		return "", "", err
	}
	if latest != "" {
		newest, err := checkpoint.StepOf(latest)
		if err != nil {
			return "", "", err
		}
		if newest > fromStep && sameDir(filepath.Dir(from), cfg.Checkpoint.Dir) && env.RestartCount == 0 {
			// Going back to an earlier step of this same run: the newer checkpoints are the
			// future it abandons, set aside (not deleted) so they do not mix with the new one's.
			moved, err := checkpoint.SetAsideAfter(cfg.Checkpoint.Dir, fromStep)
			if err != nil {
				return "", "", err
			}
			if len(moved) > 0 {
				log.Info("--resume-from an earlier step of this run: its newer checkpoints set aside (renamed abandoned-…)", "step", fromStep, "set_aside", len(moved), "dir", cfg.Checkpoint.Dir)
			}
			return from, "--resume-from " + from, nil
		}
		if newest > fromStep {
			if env.RestartCount > 0 {
				log.Info("a restart: resuming from this job's newest checkpoint, not --resume-from's", "path", latest, "resume_from", from)
				return latest, inDir, nil
			}
			return "", "", fmt.Errorf("worker: --resume-from %s (step %d): %s already holds step %d, a checkpoint of another run "+
				"that would mix with this one's (pruning keeps the newest; a restart resumes from the newest): point checkpoint.dir "+
				"elsewhere (--set checkpoint.dir=...) or remove its checkpoints after step %d", from, fromStep, inDir, newest, fromStep)
		}
	}
	return from, "--resume-from " + from, nil
}

// sameDir says whether a and b name the same directory (by path, then by file identity).
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// MasterPortTakenError is rank 0's failure to listen on MASTER_ADDR:MASTER_PORT because another
// process holds that address: a launcher that drew the port itself (ddplaunch without
// --master-port) takes the same workers again on another port instead of counting a restart;
// ddptrain says it by its exit status (launcher.ExitMasterPortTaken).
type MasterPortTakenError struct {
	Addr string // MASTER_ADDR:MASTER_PORT
	Err  error
}

func (e *MasterPortTakenError) Error() string {
	return fmt.Sprintf("worker: joining the process group: MASTER_ADDR:MASTER_PORT %s is taken by another process: %v", e.Addr, e.Err)
}

func (e *MasterPortTakenError) Unwrap() error { return e.Err }

// FinishedError is what New (and Run) return when the checkpoint a run resumes from is at or
// past its last step: there is nothing to train. It is not a failure: ddptrain prints it and
// exits 0. Summary is the finished run's, from the checkpoint (nil for one an earlier build wrote).
type FinishedError struct {
	Step    int    // the checkpoint's step
	Total   int    // this config's last step
	Path    string // the checkpoint
	Summary *observe.SummaryMetrics
}

func (e *FinishedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run already finished at step %d", e.Step)
	if e.Step > e.Total {
		fmt.Fprintf(&b, " (this config ends at step %d)", e.Total)
	}
	fmt.Fprintf(&b, ": nothing to do (checkpoint %s)", e.Path)
	if e.Summary != nil {
		fmt.Fprintf(&b, "; the summary of that run is: %s", observe.FormatSummary(e.Summary))
	} else {
		b.WriteString("; that checkpoint records no summary (it was not written at the end of a run, or an earlier build wrote it)")
	}
	return b.String()
}

// savedSummary is the summary a checkpoint's state carries (the last step's only), or nil.
func savedSummary(st *checkpoint.State, log *slog.Logger) *observe.SummaryMetrics {
	if len(st.Summary) == 0 {
		return nil
	}
	var sum observe.SummaryMetrics
	if err := json.Unmarshal(st.Summary, &sum); err != nil {
		log.Warn("the checkpoint's summary does not decode", "err", err)
		return nil
	}
	return &sum
}

// onClose registers f to run at Close, before everything registered earlier.
func (t *Trainer) onClose(f func() error) { t.closers = append(t.closers, f) }

// Close releases everything New opened, in reverse order, and returns their errors joined (the
// metrics file's first write error among them). Safe to call more than once.
func (t *Trainer) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for i := len(t.closers) - 1; i >= 0; i-- {
		if err := t.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	t.closers = nil
	return errors.Join(errs...)
}

// Run sets up a run of cfg (New), trains it to the end ((*Trainer).Run), closes it, and returns
// the summary. ctx cancels it; cfg is not changed.
func Run(ctx context.Context, cfg *Config, opt Options) (*Result, error) {
	t, err := New(ctx, cfg, opt)
	if err != nil {
		return nil, err
	}
	res, err := t.Run(ctx)
	if err = errors.Join(err, t.Close()); err != nil {
		return nil, err
	}
	return res, nil
}

// syncBatchNorm sets model.sync_batchnorm up: with world > 1 the BatchNorm layers reduce their
// statistics (model.StatReducer) over a process group of their own — a channel beside the main
// group, since DDP's gradient all-reduce runs on the main one during the backward, when the
// layers reduce Σdy and Σdy·x̂. Set after micro_batch: auto's search, which runs the model on
// each rank alone. World 1: nothing to synchronise, the layers stay local.
func (t *Trainer) syncBatchNorm(ctx context.Context, cfg *Config, env Env, m model.Model, group *allreduce.Group, gcfg allreduce.Config) error {
	if !cfg.Model.SyncBatchNorm || env.WorldSize == 1 {
		return nil
	}
	chs, err := allreduce.OpenChannels(ctx, group, gcfg, 2)
	if err != nil {
		return fmt.Errorf("worker: model.sync_batchnorm: opening its process group: %w", err)
	}
	t.onClose(chs[0].Close)
	red := ddp.StatReducer(ctx, chs[0]) // Run gives it the loop's context
	if !model.SetStatReducer(m, red) {
		return fmt.Errorf("worker: model.sync_batchnorm: model.kind %s has no BatchNorm", t.spec.Kind)
	}
	t.syncBN = red
	if env.Rank == 0 {
		t.log.Info("sync_batchnorm: BatchNorm statistics over every rank, on a process group of their own", "world", env.WorldSize)
	}
	return nil
}
