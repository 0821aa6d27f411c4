package worker

// eval.go: evaluation. evaluate runs the eval split, sharded by rank and averaged over the ranks,
// during a run and at its end (loop.go). EvaluateCheckpoint scores a checkpoint on it without
// training (ddptrain eval): one process on one device, the model built from the config, its
// weights loaded from the checkpoint (checkpoint.LoadWeights). The config is the one the
// checkpoint records (its trajectory config; the other keys at their defaults) unless the
// caller gives one.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
	"github.com/goddp/goddp/worker/observe"
)

// EvalReport is the result of EvaluateCheckpoint (ddptrain eval --json writes it).
type EvalReport struct {
	Checkpoint   string   `json:"checkpoint"` // the step directory
	Step         int      `json:"step"`
	EvalLoss     float64  `json:"eval_loss"`               // nats per sample (per token for a language model)
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"` // classifiers only
	Samples      int      `json:"samples"`                 // eval samples scored (a language model's: sequences)
	Seconds      float64  `json:"seconds"`                 // wall time of the evaluation
}

// String is the human line ddptrain eval prints.
func (r *EvalReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eval of %s (step %d): loss %.4f", r.Checkpoint, r.Step, r.EvalLoss)
	if r.EvalAccuracy != nil {
		fmt.Fprintf(&b, "  accuracy %.2f%%", 100**r.EvalAccuracy)
	}
	fmt.Fprintf(&b, "  samples %d  %.2fs", r.Samples, r.Seconds)
	return b.String()
}

// ConfigFromCheckpoint rebuilds a run's config from the trajectory config its checkpoint records:
// every trajectory key at the checkpoint's value, the others at their defaults (data.path at this
// host's default; train.max_steps the checkpoint's step when the schedule leaves the run's length
// out of the trajectory), then sets applied over it (--set), resolved and validated. A checkpoint from a
// build before the trajectory config records none: then the config must be given.
func ConfigFromCheckpoint(path string, sets []string) (*Config, error) {
	ck, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	st, err := checkpoint.DecodeState(ck)
	if err != nil {
		return nil, err
	}
	if st.Trajectory == nil {
		return nil, fmt.Errorf("worker: %s records no config (an earlier build wrote it): give the run's --config", path)
	}
	c := config.Default()
	for _, k := range config.Keys() {
		v, ok := st.Trajectory[k]
		if !ok || v == config.NotUsed {
			continue
		}
		if err := c.Set(k + "=" + v); err != nil {
			return nil, fmt.Errorf("worker: %s: the recorded config: %w", path, err)
		}
	}
	if c.Train.Epochs == 0 && c.Train.MaxSteps == 0 {
		c.Train.MaxSteps = max(1, st.Step) // the run's length is not part of a constant schedule's trajectory
	}
	c.Data.Path = st.DataPath // where the run read its data (--set data.path=... overrides)
	for _, kv := range sets {
		if err := c.Set(kv); err != nil {
			return nil, err
		}
	}
	c = c.Resolved()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %s: the recorded config: %w", path, err)
	}
	if err := fillDataPath(c); err != nil {
		return nil, err
	}
	return c, nil
}

// EvaluateCheckpoint scores the checkpoint at path (a step directory, or a checkpoint.dir for
// its newest) on cfg's eval split, in this process alone: opt.Device and opt.Logger are used,
// the rest of opt is not. The micro-batch is train.micro_batch (64 when it is auto: set
// train.micro_batch for another); train.eval_batches limits the batches (0 = the whole split).
// When the checkpoint records a trajectory config, keys of it that differ from cfg's are logged
// as a warning (a model key that differs changes the scores); the weights must match the model
// by name and shape.
func EvaluateCheckpoint(ctx context.Context, path string, cfg *Config, opt Options) (_ *EvalReport, err error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	path, err = checkpoint.Resolve(path)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	st, err := checkpoint.DecodeState(ck)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	if err := fillDataPath(cfg); err != nil {
		return nil, err
	}
	if cfg.Train.MicroBatchAuto || cfg.Train.MicroBatch <= 0 {
		cfg.Train.MicroBatch, cfg.Train.MicroBatchAuto = 64, false
	}
	if st.Trajectory != nil {
		for _, d := range config.DiffTrajectory(st.Trajectory, cfg.Trajectory()) {
			if d.Key == "seed" || strings.HasPrefix(d.Key, "train.") || strings.HasPrefix(d.Key, "loss_scale.") || strings.HasPrefix(d.Key, "ddp.") {
				continue // the optimizer, the batch and the seed do not change an evaluation
			}
			log.Warn("this config differs from the checkpoint's", "key", d.Key, "checkpoint", d.Old, "config", d.New)
		}
	}

	dev, err := OpenDevice(opt.Device, 0)
	if err != nil {
		return nil, err
	}
	spec, err := ModelSpec(cfg)
	if err != nil {
		return nil, err
	}
	_, evalSet, err := loadData(cfg, spec)
	if err != nil {
		return nil, err
	}
	m, err := model.New(dev, spec, uint64(cfg.Seed))
	if err != nil {
		return nil, err
	}
	defer m.Free()
	var bufs *model.Buffers // BatchNorm running statistics: the checkpoint's
	if b, ok := m.(model.Buffered); ok {
		bufs = b.Buffers()
	}
	if err := checkpoint.LoadWeights(ck, m.Params(), bufs); err != nil {
		return nil, err
	}
	group, err := allreduce.NewGroup(ctx, allreduce.Config{Rank: 0, WorldSize: 1})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, group.Close()) }()

	t0 := time.Now()
	ev, err := evaluate(ctx, m, dev, evalSet, cfg, Env{WorldSize: 1, LocalWorldSize: 1}, group)
	if err != nil {
		return nil, err
	}
	r := &EvalReport{Checkpoint: path, Step: ck.Step, EvalLoss: ev.Loss, Samples: ev.Samples, Seconds: time.Since(t0).Seconds()}
	if m.Classifier() {
		r.EvalAccuracy = observe.Float(ev.Accuracy)
	}
	return r, nil
}

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
	in := newInputs(dev, m.Input(), b)
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
		if m.Classifier() {
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
	perSample := float64(m.TargetsPerSample()) // a language model's sample has one per position
	return evalResult{Loss: float64(v[0]) / float64(v[2]), Accuracy: float64(v[1]) / float64(v[2]),
		Samples: int(math.Round(float64(v[2]) / perSample))}, nil
}
