package worker

// trainer.go: a training process in three calls. New opens everything a run needs, in order;
// (*Trainer).Run (loop.go) trains; Close releases what New opened, in reverse order, once. A New
// that fails partway closes what it had opened before returning. Nothing here exits the process:
// failures are errors, and cmd/ddptrain maps them to exit codes.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	Logger       *slog.Logger

	// Test hooks: nil in production. cmd/ddptrain sets them from DDP_FAIL_AT_STEP and
	// DDP_INJECT_INF_STEP/RANK for the restart and loss-scaler tests.

	// FaultHook, when set, is called before each step; an error it returns ends the run (Run
	// returns it wrapped, so errors.Is finds it), after which Close releases everything as after
	// any other failure.
	FaultHook func(step int) error
	// InjectInf, when set, is asked after each step's backward whether to put +Inf into this
	// rank's first gradient element (tests of the loss-scaler agreement).
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
	prog    *Progress
	in      *inputs

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
	t.evalSet = evalSet
	m, err := buildModel(dev, cfg)
	if err != nil {
		return nil, err
	}
	if opt.wrapModel != nil {
		m = opt.wrapModel(m)
	}
	t.m = m
	t.onClose(func() error { m.Free(); return nil })
	ps := m.Params()
	t.ps = ps
	opt2, err := buildOptimizer(cfg, ps)
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
	t.onClose(func() error {
		var errs []error
		for _, g := range channels {
			errs = append(errs, g.Close())
		}
		return errors.Join(errs...)
	})
	eng := ddp.New(ps, group, ddp.Options{BucketCapMB: cfg.DDP.BucketCapMB, Wire: wireOf(cfg), Trace: trace, Logger: log, Channels: asComms(channels)})
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
		if path, err := LatestCheckpoint(cfg.Checkpoint.Dir); err == nil && path != "" {
			if err := st.restore(path, cfg, ps, opt2, scaler); err != nil {
				return nil, err
			}
			log.Info("resumed from checkpoint", "path", path, "step", st.Step)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := eng.BroadcastTensors(ctx, append(append([]*tensor.Tensor{ps.Data}, optimizerTensors(opt2)...), modelBuffers(m)...)); err != nil {
		return nil, err
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

	// ---- outputs, and the device buffers the batches are uploaded into ----
	t.metrics, err = OpenMetrics(opt.MetricsPath, env.Rank)
	if err != nil {
		return nil, err
	}
	t.onClose(t.metrics.Close)
	t.prog = NewProgress(t.total, env.Rank, env.ProgressFD)
	t.onClose(func() error { t.prog.Finish(); return nil })
	in := newInputs(dev, cfg, b)
	t.in = in
	t.onClose(func() error { in.free(dev); return nil })
	return t, nil
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
