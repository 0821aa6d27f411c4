package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
)

// runState is everything besides tensors that a resumed run needs to continue exactly: the step,
// where the data stream is, the loss scaler, the optimizer's step count. (Random numbers are
// counter-based, derived from the seed and the step, so there is no generator state to save.)
type runState struct {
	Step      int              `json:"step"`
	Skipped   int              `json:"skipped"`
	Loader    data.LoaderState `json:"loader"`
	Scaler    ScalerState      `json:"scaler"`
	OptimStep int64            `json:"optim_step"`
	// ConfigHash is config.Config.Hash, the sha256 of Trajectory, the trajectory config: the keys
	// and values the run's weights depend on (worker/config/hash.go). A resume compares the
	// trajectory key by key, so a refusal names what differs. Checkpoints of builds before the
	// trajectory config have no Trajectory and a ConfigHash that is config.Config.HashV1.
	ConfigHash string            `json:"config_hash"`
	Trajectory map[string]string `json:"trajectory,omitempty"`
	WorldSize  int               `json:"world_size"`
	// InitFrom is model.init_from of the run's first start and InitSHA256 the sha256 of the f32
	// weights it gave (Params.SHA256): where the trajectory began, which the config hash leaves
	// out (config/hash.go). Carried from checkpoint to checkpoint.
	InitFrom   string `json:"init_from,omitempty"`
	InitSHA256 string `json:"init_sha256,omitempty"`
	// Summary is the run's summary, in the checkpoint of its last step only: a run started again
	// after it finished prints it (FinishedError).
	Summary   *SummaryMetrics `json:"summary,omitempty"`
	resumedAt int
	spec      model.Spec // the model's, written with every checkpoint (model.Spec)
	writing   *ckptWrite // the checkpoint write in flight (save), or nil
	// wholeOptim: under ddp.shard_optimizer, the optimizer state gathered whole for the next
	// save (nil: opt.State() is whole already)
	wholeOptim []model.NamedTensor
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
	whole := s.wholeOptim // ddp.shard_optimizer: gathered by every rank (Trainer.gatherOptimState)
	s.wholeOptim = nil
	if !checkpointWriter(cfg, env) {
		return nil
	}
	if err := s.waitWrite(); err != nil {
		return err
	}
	s.Scaler = sc.State()
	s.OptimStep = opt.Steps()
	s.Trajectory = cfg.Trajectory()
	s.ConfigHash = config.TrajectoryHash(s.Trajectory)
	s.WorldSize = env.WorldSize
	weights := ps.NamedWeights()
	if s.buffers != nil {
		for _, b := range s.buffers.List {
			weights = append(weights, tensorToNamed(b.Name, b.T))
		}
	}
	optim := whole
	if whole == nil {
		for _, st := range opt.State() {
			optim = append(optim, tensorToNamed(st.Name, st.T))
		}
	}
	state, err := json.Marshal(s) // now: s moves on while the write runs
	if err != nil {
		return fmt.Errorf("checkpoint: encoding state.json: %w", err)
	}
	dir, step, keep, spec := cfg.Checkpoint.Dir, s.Step, cfg.Checkpoint.Keep, s.spec
	w := &ckptWrite{step: step, done: make(chan struct{})}
	s.writing = w
	go func() {
		defer close(w.done)
		path, err := SaveModelCheckpoint(dir, step, spec, weights, optim, json.RawMessage(state))
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
// another trajectory is refused, naming each key that differs (checkTrajectory); where says
// where the checkpoint came from ("checkpoint.dir /runs/a", "--resume-from /runs/a/step-…"), and
// world is this run's world size. Nothing is half-loaded: every tensor is checked before any is
// written.
func (s *runState) restore(path, where string, world int, cfg *Config, ps *model.Params, opt Optimizer, sc *Scaler, log *slog.Logger) error {
	ck, err := LoadCheckpoint(path)
	if err != nil {
		return err
	}
	saved, err := decodeState(ck)
	if err != nil {
		return err
	}
	if err := checkTrajectory(saved, cfg, where, world); err != nil {
		return err
	}
	if saved.Trajectory == nil {
		log.Info("resuming from an earlier build's checkpoint (a config hash, no trajectory config): the config hashes the same", "path", path)
	}
	loads, err := weightLoads(ck, ps)
	if err != nil {
		return err
	}
	if s.buffers != nil {
		byName := map[string]model.NamedTensor{}
		for _, t := range ck.Weights {
			byName[t.Name] = t
		}
		for _, b := range s.buffers.List {
			nt, ok := byName[b.Name]
			if !ok {
				return fmt.Errorf("checkpoint: %s has no buffer %q", path, b.Name)
			}
			v, err := namedToF32(nt, b.T)
			if err != nil {
				return fmt.Errorf("checkpoint: %s: %w", path, err)
			}
			loads = append(loads, tensorLoad{b.T, v})
		}
	}
	optByName := map[string]model.NamedTensor{}
	for _, t := range ck.Optim {
		optByName[t.Name] = t
	}
	// A checkpoint holds the whole optimizer state, sharded run or not (Trainer.gatherOptimState):
	// under ddp.shard_optimizer each rank takes its own shard of it, at any world size.
	shard := optimizerShard(opt)
	for _, st := range opt.State() {
		nt, ok := optByName[st.Name]
		if !ok {
			return fmt.Errorf("checkpoint: %s has no optimizer state %q (another optimizer?)", path, st.Name)
		}
		var v []float32
		if shard != nil {
			v, err = namedToF32Shape(nt, []int{ps.N})
			if err == nil {
				v = shard.Pack(v)
			}
		} else {
			v, err = namedToF32(nt, st.T)
		}
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w", path, err)
		}
		loads = append(loads, tensorLoad{st.T, v})
	}
	uploadAll(ps, loads)
	opt.SetSteps(saved.OptimStep)
	sc.SetState(saved.Scaler)
	spec, bufs := s.spec, s.buffers // the model's own, not the checkpoint's
	*s = *saved
	s.resumedAt, s.spec, s.buffers = saved.Step, spec, bufs
	return nil
}

// decodeState reads a loaded checkpoint's state.json.
func decodeState(ck *Checkpoint) (*runState, error) {
	var saved runState
	if err := json.Unmarshal(ck.State, &saved); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: state.json: %w", ck.Path, err)
	}
	return &saved, nil
}

// tensorLoad is a tensor to fill and the values for it.
type tensorLoad struct {
	t    *tensor.Tensor
	vals []float32
}

// weightLoads matches a checkpoint's weights with the parameters, by name and shape.
func weightLoads(ck *Checkpoint, ps *model.Params) ([]tensorLoad, error) {
	byName := map[string]model.NamedTensor{}
	for _, t := range ck.Weights {
		byName[t.Name] = t
	}
	var loads []tensorLoad
	for _, p := range ps.List {
		nt, ok := byName[p.Name]
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s has no weights for parameter %q", ck.Path, p.Name)
		}
		v, err := namedToF32(nt, p.W)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %s: %w", ck.Path, err)
		}
		loads = append(loads, tensorLoad{p.W, v})
	}
	return loads, nil
}

// uploadAll writes the loads to the device and refreshes the f16 copy of the weights.
func uploadAll(ps *model.Params, loads []tensorLoad) {
	dev := ps.Device()
	for _, l := range loads {
		dev.Upload(l.t, l.vals)
	}
	ps.SyncHalf()
}

// checkTrajectory refuses to resume from a checkpoint of another trajectory. A checkpoint with a
// trajectory config is compared key by key (config.DiffTrajectory), and the refusal names each
// key with the checkpoint's value and this run's. One from a build before the trajectory config
// (a hash of the whole config, HashV1) is accepted when this config's HashV1 is the same; that
// build recorded nothing to say which key differs, so the refusal says so.
func checkTrajectory(saved *runState, cfg *Config, where string, world int) error {
	if saved.Trajectory == nil {
		if saved.ConfigHash == cfg.HashV1() {
			return nil
		}
		return fmt.Errorf("worker: refusing to resume: %s (step %d) was written by an earlier build of goddp, which recorded only a hash "+
			"of the whole config (%.12s; this config's is %.12s). Some key differs, and that build's hash covered every key, checkpoint.keep, "+
			"train.eval_every and ddp.check_every included, so it cannot say which: resume with exactly that run's config, or start over "+
			"in another checkpoint.dir", where, saved.Step, saved.ConfigHash, cfg.HashV1())
	}
	diffs := config.DiffTrajectory(saved.Trajectory, cfg.Trajectory())
	if len(diffs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "worker: refusing to resume: %s (step %d) was trained with ", where, saved.Step)
	for i, d := range diffs {
		if i > 0 {
			b.WriteString("; with ")
		}
		fmt.Fprintf(&b, "%s, this run has %s", keyValue(d.Key, d.Old), keyValue(d.Key, d.New))
		if d.Key == "train.global_batch" && saved.WorldSize > 0 && saved.WorldSize != world {
			fmt.Fprintf(&b, " (global_batch = micro_batch × grad_accum_steps × world size, and the world size was %d, now %d: "+
				"set train.global_batch=%s to keep it)", saved.WorldSize, world, d.Old)
		}
	}
	b.WriteString(". These keys change the trajectory: resume with the checkpoint's values, or start over in another checkpoint.dir")
	return errors.New(b.String())
}

// keyValue writes key=value, or "key unused" for a key its condition leaves out of the trajectory.
func keyValue(key, v string) string {
	if v == config.NotUsed {
		return key + " unused"
	}
	return key + "=" + v
}

func tensorToNamed(name string, t *tensor.Tensor) model.NamedTensor {
	return model.NamedTensor{Name: name, DType: tensor.F32, Shape: append([]int(nil), t.Shape()...), Data: model.F32Bytes(tensor.ToHost(t))}
}

func namedToF32(nt model.NamedTensor, want *tensor.Tensor) ([]float32, error) {
	return namedToF32Shape(nt, want.Shape())
}

func namedToF32Shape(nt model.NamedTensor, shape []int) ([]float32, error) {
	if nt.DType != tensor.F32 {
		return nil, fmt.Errorf("tensor %q is %s, want f32", nt.Name, nt.DType)
	}
	n := 1
	for _, d := range nt.Shape {
		n *= d
	}
	if n != tensor.Numel(shape) || fmt.Sprint(nt.Shape) != fmt.Sprint(shape) {
		return nil, fmt.Errorf("tensor %q has shape %v, the model wants %v", nt.Name, nt.Shape, shape)
	}
	return model.BytesF32(nt.Data), nil
}
