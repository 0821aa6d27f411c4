package worker

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

// runState is everything besides tensors that a resumed run needs to continue exactly: the step,
// where the data stream is, the loss scaler, the optimizer's step count. (Random numbers are
// counter-based, derived from the seed and the step, so there is no generator state to save.)
type runState struct {
	Step       int              `json:"step"`
	Skipped    int              `json:"skipped"`
	Loader     data.LoaderState `json:"loader"`
	Scaler     ScalerState      `json:"scaler"`
	OptimStep  int64            `json:"optim_step"`
	ConfigHash string           `json:"config_hash"`
	WorldSize  int              `json:"world_size"`
	resumedAt  int
	writing    *ckptWrite // the checkpoint write in flight (save), or nil
	// buffers are the model's buffers (BatchNorm running statistics), saved with the weights
	// under their names; nil for a model without any.
	buffers *model.Buffers
}

func (s *runState) firstStep() int { return s.resumedAt }

// save checkpoints the current state: global rank 0 (and with checkpoint.per_host, local rank 0
// of every host) takes a snapshot in host memory now and writes it in the background, so the
// other ranks' next collective never waits on the disk (a slow fsync used to run them into the
// collective timeout); other ranks return at once. One write is in flight at a time: save first
// waits for the previous one and returns its error. waitWrite waits for the last.
func (s *runState) save(cfg *Config, env Env, ps *model.Params, opt Optimizer, sc *Scaler, log *slog.Logger) error {
	if !checkpointWriter(cfg, env) {
		return nil
	}
	if err := s.waitWrite(); err != nil {
		return err
	}
	s.Scaler = sc.State()
	s.OptimStep = opt.Steps()
	s.ConfigHash = cfg.Hash()
	s.WorldSize = env.WorldSize
	weights := make([]model.NamedTensor, 0, len(ps.List))
	for _, p := range ps.List {
		weights = append(weights, tensorToNamed(p.Name, p.W))
	}
	if s.buffers != nil {
		for _, b := range s.buffers.List {
			weights = append(weights, tensorToNamed(b.Name, b.T))
		}
	}
	var optim []model.NamedTensor
	for _, st := range opt.State() {
		optim = append(optim, tensorToNamed(st.Name, st.T))
	}
	state, err := json.Marshal(s) // now: s moves on while the write runs
	if err != nil {
		return fmt.Errorf("checkpoint: encoding state.json: %w", err)
	}
	dir, step, keep := cfg.Checkpoint.Dir, s.Step, cfg.Checkpoint.Keep
	w := &ckptWrite{step: step, done: make(chan struct{})}
	s.writing = w
	go func() {
		defer close(w.done)
		path, err := SaveCheckpoint(dir, step, weights, optim, json.RawMessage(state))
		if err != nil {
			w.err = err
			return
		}
		if keep > 0 {
			if err := PruneCheckpoints(dir, keep); err != nil {
				log.Warn("pruning old checkpoints", "err", err)
			}
		}
		log.Info("checkpoint written", "path", path, "step", step)
	}()
	return nil
}

// ckptWrite is a checkpoint being written in the background (save).
type ckptWrite struct {
	step int
	done chan struct{}
	err  error // set before done is closed
}

// waitWrite waits for the checkpoint write in flight, if any, and returns its error.
func (s *runState) waitWrite() error {
	w := s.writing
	if w == nil {
		return nil
	}
	<-w.done
	s.writing = nil
	if w.err != nil {
		return fmt.Errorf("worker: writing the checkpoint of step %d: %w", w.step, w.err)
	}
	return nil
}

// restore loads a verified checkpoint into the parameters, optimizer and scaler. A checkpoint of
// another model or run configuration is refused, naming what differs; nothing is half-loaded:
// every tensor is checked before any is written.
func (s *runState) restore(path string, cfg *Config, ps *model.Params, opt Optimizer, sc *Scaler) error {
	ck, err := LoadCheckpoint(path)
	if err != nil {
		return err
	}
	var saved runState
	if err := json.Unmarshal(ck.State, &saved); err != nil {
		return fmt.Errorf("checkpoint: %s: state.json: %w", path, err)
	}
	if saved.ConfigHash != cfg.Hash() {
		return fmt.Errorf("checkpoint: %s was written by a run with another configuration (config hash %.12s, this run %.12s): refusing to resume from it", path, saved.ConfigHash, cfg.Hash())
	}
	byName := map[string]model.NamedTensor{}
	for _, t := range ck.Weights {
		byName[t.Name] = t
	}
	type load struct {
		t    *tensor.Tensor
		vals []float32
	}
	var loads []load
	for _, p := range ps.List {
		nt, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("checkpoint: %s has no weights for parameter %q", path, p.Name)
		}
		v, err := namedToF32(nt, p.W)
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w", path, err)
		}
		loads = append(loads, load{p.W, v})
	}
	if s.buffers != nil {
		for _, b := range s.buffers.List {
			nt, ok := byName[b.Name]
			if !ok {
				return fmt.Errorf("checkpoint: %s has no buffer %q", path, b.Name)
			}
			v, err := namedToF32(nt, b.T)
			if err != nil {
				return fmt.Errorf("checkpoint: %s: %w", path, err)
			}
			loads = append(loads, load{b.T, v})
		}
	}
	optByName := map[string]model.NamedTensor{}
	for _, t := range ck.Optim {
		optByName[t.Name] = t
	}
	for _, st := range opt.State() {
		nt, ok := optByName[st.Name]
		if !ok {
			return fmt.Errorf("checkpoint: %s has no optimizer state %q (another optimizer?)", path, st.Name)
		}
		v, err := namedToF32(nt, st.T)
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w", path, err)
		}
		loads = append(loads, load{st.T, v})
	}
	dev := ps.Device()
	for _, l := range loads {
		dev.Upload(l.t, l.vals)
	}
	ps.SyncHalf()
	opt.SetSteps(saved.OptimStep)
	sc.SetState(saved.Scaler)
	bufs := s.buffers
	*s = saved
	s.buffers = bufs
	s.resumedAt = saved.Step
	return nil
}

func tensorToNamed(name string, t *tensor.Tensor) model.NamedTensor {
	return model.NamedTensor{Name: name, DType: tensor.F32, Shape: append([]int(nil), t.Shape()...), Data: model.F32Bytes(tensor.ToHost(t))}
}

func namedToF32(nt model.NamedTensor, want *tensor.Tensor) ([]float32, error) {
	if nt.DType != tensor.F32 {
		return nil, fmt.Errorf("tensor %q is %s, want f32", nt.Name, nt.DType)
	}
	n := 1
	for _, d := range nt.Shape {
		n *= d
	}
	if n != want.Len() || fmt.Sprint(nt.Shape) != fmt.Sprint(want.Shape()) {
		return nil, fmt.Errorf("tensor %q has shape %v, the model wants %v", nt.Name, nt.Shape, want.Shape())
	}
	return model.BytesF32(nt.Data), nil
}
