package worker

// eval.go: scoring a checkpoint on the eval split without training (ddptrain eval). One process
// on one device: the model is built from the config, its weights loaded from the checkpoint by
// name and shape, and the eval split run as the training loop's evaluations run it (evaluate).
// The config is the one the checkpoint records (its trajectory config; the other keys at their
// defaults) unless the caller gives one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/config"
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
	_, evalSet, err := loadData(cfg)
	if err != nil {
		return nil, err
	}
	m, err := buildModel(dev, cfg)
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
	if cfg.Model.Kind != config.ModelGPT {
		r.EvalAccuracy = observe.Float(ev.Accuracy)
	}
	return r, nil
}
