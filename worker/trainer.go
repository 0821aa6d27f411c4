package worker

// trainer.go: a training process in three calls. New opens everything a run needs, in order;
// (*Trainer).Run (loop.go) trains; Close releases what New opened, in reverse order, once. A New
// that fails partway closes what it had opened before returning. Nothing here exits the process:
// failures are errors, and cmd/ddptrain maps them to exit codes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

// Options are ddptrain's command-line switches beyond the config, and the test hooks.
type Options struct {
	Device       string // "cpu" (default) or "cuda"
	MetricsPath  string // --metrics: JSON lines
	TracePath    string // --trace: Chrome trace events
	MemoryReport bool   // --memory-report
	CheckLeaks   bool   // --check-leaks
	MemoryPlot   string // --memory-plot: PNG of device memory over one step (memplot.go)
	// ResumeFrom (--resume-from) is a checkpoint step directory to resume from instead of the
	// newest in checkpoint.dir (resumePoint says when checkpoint.dir's newest is taken anyway).
	// Every rank must be able to read it.
	ResumeFrom string
	// MetricsListen (--metrics-port N is ":N") is where this process serves Prometheus metrics,
	// host:port; it overrides metrics.listen. Rank r of a host adds its LOCAL_RANK to the port
	// (prom.go).
	MetricsListen string
	Logger        *slog.Logger

	// Test hooks: nil in production. cmd/ddptrain sets them from DDP_FAIL_AT_STEP and
	// DDP_INJECT_INF_STEP/RANK for the restart and loss-scaler tests.

	// FaultHook, when set, is called before each step; an error it returns ends the run (Run
	// returns it wrapped, so errors.Is finds it), after which Close releases everything as after
	// any other failure.
	FaultHook func(step int) error
	// InjectInf, when set, is asked after each step's all-reduce whether to put +Inf into this
	// rank's first gradient element (tests of the loss-scaler agreement and bf16's error).
	InjectInf func(step int) bool
	// wrapModel, when set, wraps the model the run builds (tests: a planted leak).
	wrapModel func(model.Model) model.Model
}

// Result is what a run ends with (also the metrics summary).
type Result = SummaryMetrics

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
	dev     tensor.Device
	evalSet data.Dataset // the training set is the loader's
	m       model.Model
	ps      *model.Params
	optim   Optimizer
	scaler  *Scaler
	trace   *ddp.Trace
	eng     *ddp.Engine
	st      runState
	loader  *data.Loader
	total   int // optimizer steps of the whole run
	sched   model.Schedule
	metrics *MetricsWriter
	prom    *promMetrics // nil without metrics.listen / --metrics-port
	prog    *Progress
	in      *inputs
	groups  []*allreduce.Group // the main group and the channels: their bytes on the wire

	closers []func() error // what New opened, in order
	closed  bool
	ran     bool
}

// New sets up a run of cfg for this process (RANK, WORLD_SIZE, ... from the environment: Env):
// it joins the process group, opens the device, loads the data, builds the model, optimizer and
// scaler, resolves the batch (searching it for micro_batch: auto), resumes from the newest
// checkpoint and makes every replica identical. cfg is not changed. ctx cancels the setup's
// blocking calls (the group's rendezvous, the collectives).
func New(ctx context.Context, cfg *Config, opt Options) (_ *Trainer, err error) {
	t := &Trainer{opt: opt, wall: time.Now()}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	env, err := EnvFromOS()
	if err != nil {
		return nil, err
	}
	log = log.With("rank", env.Rank)
	if env.HeartbeatFD >= 0 {
		t.onClose(startHeartbeat(env.HeartbeatFD))
	}
	cfg = cfg.Clone()
	if err := fillDataPath(cfg); err != nil {
		return nil, err
	}
	t.cfg, t.env, t.log = cfg, env, log

	// ---- the process group ----
	var group *allreduce.Group
	var gcfg allreduce.Config // the main group's, which the channels copy
	if env.WorldSize > 1 {
		gcfg, err = allreduce.ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		gcfg.Logger = log
		gcfg.Timeout = cfg.DDP.Timeout.D // 0: allreduce's default
		group, err = allreduce.NewGroup(ctx, gcfg)
		if err != nil {
			return nil, fmt.Errorf("worker: joining the process group: %w", err)
		}
	} else {
		group, err = allreduce.NewGroup(ctx, allreduce.Config{Rank: 0, WorldSize: 1})
		if err != nil {
			return nil, err
		}
	}
	t.group = group
	t.onClose(group.Close)
	if !cfg.Train.MicroBatchAuto { // auto: resolved by the search below (autobatch.go)
		b, err := cfg.Train.ResolveBatch(env.WorldSize)
		if err != nil {
			return nil, err
		}
		cfg.Train = cfg.Train.WithBatch(b)
	}

	// ---- device, data, model, optimizer ----
	dev, err := OpenDevice(opt.Device, env.LocalRank)
	if err != nil {
		return nil, err
	}
	t.dev = dev
	trainSet, evalSet, err := loadData(cfg)
	if err != nil {
		return nil, err
	}
	for _, ds := range []data.Dataset{trainSet, evalSet} {
		if c, ok := ds.(io.Closer); ok { // token shards: unmapped at the end
			t.onClose(c.Close)
		}
	}
	t.evalSet = evalSet
	m, err := buildModel(dev, cfg)
	if err != nil {
		return nil, err
	}
	if t.st.spec, err = ModelSpec(cfg); err != nil {
		return nil, err
	}
	if opt.wrapModel != nil {
		m = opt.wrapModel(m)
	}
	t.m = m
	t.onClose(func() error { m.Free(); return nil })
	ps := m.Params()
	t.ps = ps
	// ddp.shard_optimizer: the optimizer keeps this rank's shard only (ddp/shard.go); the engine
	// below plans the same shard from the same buckets.
	shard, err := optimizerShardFor(cfg, env, dev, ps)
	if err != nil {
		return nil, err
	}
	opt2, err := buildOptimizer(cfg, ps, shard)
	if err != nil {
		return nil, err
	}
	t.optim = opt2
	t.onClose(func() error { opt2.Free(); return nil })
	scaler, err := buildScaler(dev, cfg)
	if err != nil {
		return nil, err
	}
	t.scaler = scaler
	t.onClose(func() error { scaler.Free(); return nil })
	// ---- memory: the budget, and micro_batch: auto (autobatch.go) before any state is loaded ----
	if cfg.Train.MicroBatchAuto {
		b, err := autoMicroBatch(ctx, dev, cfg, m, opt2, scaler, group, trainSet.Len()/env.WorldSize, log)
		if err != nil {
			return nil, err
		}
		cfg.Train = cfg.Train.WithBatch(b)
	} else if cfg.Train.MemoryBudget.Bytes > 0 {
		dev.SetLimit(cfg.Train.MemoryBudget.Bytes)
	}
	var trace *ddp.Trace
	if opt.TracePath != "" {
		trace = ddp.NewTrace(env.Rank)
	}
	t.trace = trace
	channels, err := allreduce.OpenChannels(ctx, group, gcfg, cfg.DDP.Channels)
	if err != nil {
		return nil, err
	}
	t.groups = append([]*allreduce.Group{group}, channels...)
	t.onClose(func() error {
		var errs []error
		for _, g := range channels {
			errs = append(errs, g.Close())
		}
		return errors.Join(errs...)
	})
	eng := ddp.New(ps, group, ddp.Options{BucketCapMB: cfg.DDP.BucketCapMB, Wire: wireOf(cfg), Trace: trace, Logger: log, Channels: asComms(channels),
		ShardOptimizer: shard != nil})
	t.eng = eng
	t.onClose(func() error { eng.Close(); return nil })

	// ---- resume, then make every replica identical ----
	st := &t.st
	if b, ok := m.(model.Buffered); ok {
		st.buffers = b.Buffers()
	}
	t.onClose(st.waitWrite) // a checkpoint still being written (state.go: save) lands before the process goes
	if cfg.Checkpoint.Dir != "" {
		cfg.Checkpoint.Dir = expandCheckpointDir(cfg.Checkpoint.Dir, env)
		// Every rank ends up seeing the newest checkpoint any rank has (hosts without a shared
		// filesystem; a no-op when they share one).
		if err := syncCheckpoints(ctx, group, cfg.Checkpoint.Dir, env, log); err != nil {
			return nil, err
		}
	}
	resumed, where, err := resumePoint(cfg, opt.ResumeFrom, env, log)
	if err != nil {
		return nil, err
	}
	if resumed != "" {
		if err := st.restore(resumed, where, env.WorldSize, cfg, ps, opt2, scaler, log); err != nil {
			return nil, err
		}
		log.Info("resumed from checkpoint", "path", resumed, "step", st.Step)
		if cfg.Model.InitFrom != "" {
			log.Info("model.init_from is not read: the checkpoint's weights supersede it", "init_from", cfg.Model.InitFrom, "run_started_from", st.InitFrom)
		}
	}
	// ---- or start from model.init_from's weights (rank 0 reads them; the broadcast below) ----
	if resumed == "" && cfg.Model.InitFrom != "" {
		st.InitFrom = cfg.Model.InitFrom
		if env.Rank == 0 {
			if err := loadInitFrom(cfg.Model.InitFrom, st.spec, ps, log); err != nil {
				return nil, err
			}
		}
	}
	optState := optimizerTensors(opt2)
	if shard != nil { // each rank's own shard: zeros, or its part of the checkpoint's whole state
		optState = nil
	}
	if err := eng.BroadcastTensors(ctx, append(append([]*tensor.Tensor{ps.Data}, optState...), modelBuffers(m)...)); err != nil {
		return nil, err
	}
	if resumed == "" && cfg.Model.InitFrom != "" {
		st.InitSHA256 = ps.SHA256()
	}

	b, k, W := cfg.Train.MicroBatch, cfg.Train.GradAccumSteps, env.WorldSize
	loader, err := data.NewLoader(trainSet, data.LoaderConfig{
		MicroBatch: b, Accum: k, Rank: env.Rank, World: W, Seed: uint64(cfg.Seed),
		Shuffle: cfg.Data.Shuffle, Workers: cfg.Data.Workers, Prefetch: cfg.Data.Prefetch, Start: st.Loader,
		Alloc: batchAllocator(dev), // pinned host memory on a GPU (pinned.go)
	})
	if err != nil {
		return nil, err
	}
	t.loader = loader
	t.onClose(func() error { loader.Close(); return nil })
	t.total = totalSteps(cfg, loader.StepsPerEpoch())
	t.sched, err = buildSchedule(cfg, t.total)
	if err != nil {
		return nil, err
	}
	if resumed != "" && st.Step >= t.total { // before the outputs: the finished run's metrics file stays as it was
		return nil, &FinishedError{Step: st.Step, Total: t.total, Path: resumed, Summary: st.Summary}
	}

	// ---- outputs, and the device buffers the batches are uploaded into ----
	t.metrics, err = OpenMetrics(opt.MetricsPath, env.Rank)
	if err != nil {
		return nil, err
	}
	t.onClose(t.metrics.Close)
	listen := cfg.Metrics.Listen
	if opt.MetricsListen != "" {
		listen = opt.MetricsListen
	}
	if listen != "" {
		t.prom, err = servePrometheus(listen, env, log)
		if err != nil {
			return nil, err
		}
		t.onClose(t.prom.close)
	}
	t.prog = NewProgress(t.total, env.Rank, env.ProgressFD)
	t.onClose(func() error { t.prog.Finish(); return nil })
	in := newInputs(dev, cfg, b)
	t.in = in
	t.onClose(func() error { in.free(dev); return nil })
	return t, nil
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
		// ResumeCheckpoint: the newest complete one; when every one is broken, an error naming
		// them, unless checkpoint.fresh_if_broken (then they are set aside and the run starts).
		if latest, err = ResumeCheckpoint(dir, cfg.Checkpoint.FreshIfBroken, log); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
	}
	inDir := "checkpoint.dir " + cfg.Checkpoint.Dir
	if from == "" {
		return latest, inDir, nil
	}
	if err := VerifyCheckpoint(from); err != nil {
		if paths, _, _ := stepDirs(from); len(paths) > 0 {
			return "", "", fmt.Errorf("worker: --resume-from %s is a checkpoint directory, not a checkpoint: name one of its step directories, e.g. %s", from, paths[0])
		}
		return "", "", fmt.Errorf("worker: --resume-from: %w", err)
	}
	fromStep, err := stepOfCheckpoint(from)
	if err != nil {
		return "", "", err
	}
	if latest != "" {
		newest, err := stepOfCheckpoint(latest)
		if err != nil {
			return "", "", err
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

// FinishedError is what New (and Run) return when the checkpoint a run resumes from is at or
// past its last step: there is nothing to train. It is not a failure: ddptrain prints it and
// exits 0. Summary is the finished run's, from the checkpoint (nil for one an earlier build wrote).
type FinishedError struct {
	Step    int    // the checkpoint's step
	Total   int    // this config's last step
	Path    string // the checkpoint
	Summary *SummaryMetrics
}

func (e *FinishedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run already finished at step %d", e.Step)
	if e.Step > e.Total {
		fmt.Fprintf(&b, " (this config ends at step %d)", e.Total)
	}
	fmt.Fprintf(&b, ": nothing to do (checkpoint %s)", e.Path)
	if e.Summary != nil {
		fmt.Fprintf(&b, "; the summary of that run is: %s", FormatSummary(e.Summary))
	} else {
		b.WriteString("; that checkpoint records no summary (it was not written at the end of a run, or an earlier build wrote it)")
	}
	return b.String()
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
