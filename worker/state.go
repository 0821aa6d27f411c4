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
	// InitFrom is model.init_from of the run's first start and InitSHA256 the sha256 of the f32
	// weights it gave (Params.SHA256): where the trajectory began, which the config hash leaves
	// out (config/hash.go). Carried from checkpoint to checkpoint.
	InitFrom   string `json:"init_from,omitempty"`
	InitSHA256 string `json:"init_sha256,omitempty"`
	resumedAt  int
	spec       model.Spec // the model's, written with every checkpoint (model.Spec)
}

func (s *runState) firstStep() int { return s.resumedAt }

// save writes a checkpoint of the current state: global rank 0 (and with checkpoint.per_host,
// local rank 0 of every host); other ranks return at once.
func (s *runState) save(cfg *Config, env Env, ps *model.Params, opt Optimizer, sc *Scaler, log *slog.Logger) error {
	if !checkpointWriter(cfg, env) {
		return nil
	}
	s.Scaler = sc.State()
	s.OptimStep = opt.Steps()
	s.ConfigHash = cfg.Hash()
	s.WorldSize = env.WorldSize
	weights := ps.NamedWeights()
	var optim []model.NamedTensor
	for _, st := range opt.State() {
		optim = append(optim, tensorToNamed(st.Name, st.T))
	}
	path, err := SaveModelCheckpoint(cfg.Checkpoint.Dir, s.Step, s.spec, weights, optim, s)
	if err != nil {
		return err
	}
	if cfg.Checkpoint.Keep > 0 {
		if err := PruneCheckpoints(cfg.Checkpoint.Dir, cfg.Checkpoint.Keep); err != nil {
			log.Warn("pruning old checkpoints", "err", err)
		}
	}
	log.Info("checkpoint written", "path", path, "step", s.Step)
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
	spec := s.spec
	*s = saved
	s.resumedAt, s.spec = saved.Step, spec
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
