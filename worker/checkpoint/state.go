package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
)

// State is everything besides tensors that a resumed run needs to continue exactly: the step,
// where the data stream is, the loss scaler, the optimizer's step count. (Random numbers are
// counter-based, derived from the seed and the step, so there is no generator state to save.) It
// is state.json; the trainer owns one for the whole run and moves it on step by step.
type State struct {
	Step      int               `json:"step"`
	Skipped   int               `json:"skipped"`
	Loader    data.LoaderState  `json:"loader"`
	Scaler    model.ScalerState `json:"scaler"`
	OptimStep int64             `json:"optim_step"`
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
	// DataPath is data.path of the run that wrote the checkpoint, made absolute: not part of the
	// trajectory (another host keeps its data elsewhere), but where `ddptrain eval` finds the
	// eval split when neither --config nor --set data.path says.
	DataPath string `json:"data_path,omitempty"`
	// Summary is the run's summary line (worker/observe's SummaryMetrics, as JSON), in the
	// checkpoint of its last step only: a run started again after it finished prints it
	// (worker.FinishedError). This package does not read it.
	Summary json.RawMessage `json:"summary,omitempty"`

	// Spec is the model's, written with every checkpoint (model.Spec); Buffers are the model's
	// buffers (BatchNorm running statistics), saved with the weights under their names, nil for
	// a model without any. Both are the running model's: Restore keeps them.
	Spec    model.Spec     `json:"-"`
	Buffers *model.Buffers `json:"-"`

	// BeforeWrite, when set, is called by the background writer before it writes the
	// checkpoint of a step (tests: a slow disk, worker.Options.SlowCheckpoint).
	BeforeWrite func(step int) `json:"-"`

	resumedAt int
	writing   *write // the checkpoint write in flight (Save), or nil
}

// FirstStep is the step this process started at: the resumed checkpoint's, else 0.
func (s *State) FirstStep() int { return s.resumedAt }

// Save checkpoints the current state into cfg's checkpoint.dir: it takes a snapshot in host
// memory now and writes it in the background, so the other ranks' next collective never waits on
// the disk (a slow fsync used to run them into the collective timeout). Only the ranks that
// write checkpoints call it (IsWriter). One write is in flight at a time: Save first waits for
// the previous one and returns its error; WaitWrite waits for the last. world is the run's world
// size. shards, when opt holds a shard of the optimizer state (ddp.shard_optimizer), is every
// rank's shard file (sent to the writers first): the checkpoint holds them in optim.safetensors'
// place (shards.go); nil: opt.State() is written whole, as optim.safetensors.
// Save and WaitWrite are called from one goroutine, the trainer's.
func (s *State) Save(cfg *config.Config, world int, ps *model.Params, opt model.Optimizer, shards *OptimShards, sc *model.Scaler, log *slog.Logger) error {
	if err := s.WaitWrite(); err != nil {
		return err
	}
	s.Scaler = sc.State()
	s.OptimStep = opt.Steps()
	s.Trajectory = cfg.Trajectory()
	s.ConfigHash = config.TrajectoryHash(s.Trajectory)
	s.WorldSize = world
	s.DataPath = cfg.Data.Path
	if abs, err := filepath.Abs(cfg.Data.Path); err == nil && cfg.Data.Path != "" {
		s.DataPath = abs
	}
	var weights []model.NamedTensor
	if shards != nil && shards.Master != nil { // a sharded master, gathered whole on the host
		var err error
		if weights, err = ps.NamedWeightsOf(shards.Master); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	} else {
		weights = ps.NamedWeights()
	}
	if s.Buffers != nil {
		for _, b := range s.Buffers.List {
			weights = append(weights, tensorToNamed(b.Name, b.T))
		}
	}
	var optim []model.NamedTensor
	if shards == nil {
		for _, st := range opt.State() {
			optim = append(optim, tensorToNamed(st.Name, st.T))
		}
	}
	state, err := json.Marshal(s) // now: s moves on while the write runs
	if err != nil {
		return fmt.Errorf("checkpoint: encoding state.json: %w", err)
	}
	dir, step, keep, spec := cfg.Checkpoint.Dir, s.Step, cfg.Checkpoint.Keep, s.Spec
	w := &write{step: step, done: make(chan struct{})}
	s.writing = w
	before := s.BeforeWrite
	go func() {
		defer close(w.done)
		if before != nil {
			before(step)
		}
		var path string
		var err error
		if shards != nil {
			path, err = SaveSharded(dir, step, spec, weights, shards, json.RawMessage(state))
		} else {
			path, err = SaveModel(dir, step, spec, weights, optim, json.RawMessage(state))
		}
		if err != nil {
			w.err = err
			return
		}
		if keep > 0 {
			if err := Prune(dir, keep); err != nil {
				log.Warn("pruning old checkpoints", "err", err)
			}
		}
		log.Info("checkpoint written", "path", path, "step", step)
	}()
	return nil
}

// write is a checkpoint being written in the background (Save).
type write struct {
	step int
	done chan struct{}
	err  error // set before done is closed
}

// Writing waits up to within for the write of an earlier checkpoint and says whether it is
// still in progress, and of which step. The trainer skips a checkpoint due while it is (issue
// 30: waiting for a slow disk in Save held rank 0 out of the next collective until its peers
// timed out).
func (s *State) Writing(within time.Duration) (step int, busy bool) {
	w := s.writing
	if w == nil {
		return 0, false
	}
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-w.done:
		return w.step, false
	case <-t.C:
		return w.step, true
	}
}

// WaitWrite waits for the checkpoint write in flight, if any, and returns its error.
func (s *State) WaitWrite() error {
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

// Restore loads a verified checkpoint into the parameters, the model's buffers, optimizer and
// scaler, and s from its state.json. A checkpoint of another trajectory is refused, naming each
// key that differs (CheckTrajectory); where says where the checkpoint came from
// ("checkpoint.dir /runs/a", "--resume-from /runs/a/step-…"), and world is this run's world size.
// Nothing is half-loaded: every tensor is checked before any is written.
func (s *State) Restore(path, where string, world int, cfg *config.Config, ps *model.Params, opt model.Optimizer, sc *model.Scaler, log *slog.Logger) error {
	ck, err := Load(path)
	if err != nil {
		return err
	}
	saved, err := DecodeState(ck)
	if err != nil {
		return err
	}
	if err := CheckTrajectory(saved, cfg, where, world); err != nil {
		return err
	}
	if saved.Trajectory == nil {
		log.Info("resuming from an earlier build's checkpoint (a config hash, no trajectory config): the config hashes the same", "path", path)
	}
	optByName := map[string]model.NamedTensor{}
	for _, t := range ck.Optim {
		optByName[t.Name] = t
	}
	// An unsharded checkpoint holds the whole optimizer state: under ddp.shard_optimizer each rank
	// takes its own shard of it, at any world size. A sharded one holds it in per-rank files: each
	// rank reads the ranges it owns now from the files that hold them (its own file alone at the
	// same world size; re-sharded at another, or whole when this run is unsharded).
	shard := model.ShardOf(opt)
	var optLoads []tensorLoad
	if ck.Sharded() {
		want := [][2]int{{0, ps.N}}
		if shard != nil {
			want = shard.Ranges
		}
		var names []string
		for _, st := range opt.State() {
			names = append(names, st.Name)
		}
		vals, err := ck.OptimRanges(names, want, ps.N)
		if err != nil {
			return err
		}
		for _, st := range opt.State() {
			if v := vals[st.Name]; len(v) != st.T.Len() {
				return fmt.Errorf("checkpoint: %s: optimizer state %q: %d elements read, the optimizer holds %d", path, st.Name, len(v), st.T.Len())
			}
			optLoads = append(optLoads, tensorLoad{st.T, vals[st.Name]})
		}
		sw := ck.ShardWorld()
		switch {
		case shard == nil:
			log.Info("checkpoint: optimizer state written sharded over "+fmt.Sprint(sw)+" ranks, gathered whole (this run is unsharded) for a world of "+fmt.Sprint(world), "path", path)
		case ck.ShardFileFor(shard.Ranges) < 0 && sw == world: // the same world, other buckets
			log.Info(fmt.Sprintf("checkpoint: optimizer state written sharded over %d ranks with ddp.bucket_cap_mb %g, re-sharded for this run's %g", sw, ck.ShardBucketCapMB(), cfg.DDP.BucketCapMB), "path", path)
		case ck.ShardFileFor(shard.Ranges) < 0:
			log.Info("checkpoint: optimizer state written sharded over "+fmt.Sprint(sw)+" ranks, re-sharded for a world of "+fmt.Sprint(world), "path", path)
		}
	} else {
		for _, st := range opt.State() {
			nt, ok := optByName[st.Name]
			if !ok {
				return fmt.Errorf("checkpoint: %s has no optimizer state %q (another optimizer?)", path, st.Name)
			}
			var v []float32
			if shard != nil {
				if v, err = namedToF32Shape(nt, []int{ps.N}); err == nil {
					v = shard.Pack(v)
				}
			} else {
				v, err = namedToF32(nt, st.T)
			}
			if err != nil {
				return fmt.Errorf("checkpoint: %s: %w", path, err)
			}
			optLoads = append(optLoads, tensorLoad{st.T, v})
		}
	}
	if err := LoadWeights(ck, ps, s.Buffers); err != nil { // all or nothing; the optimizer's after
		return err
	}
	upload(ps.Device(), optLoads)
	opt.SetSteps(saved.OptimStep)
	sc.SetState(saved.Scaler)
	spec, bufs := s.Spec, s.Buffers // the model's own, not the checkpoint's
	*s = *saved
	s.resumedAt, s.Spec, s.Buffers = saved.Step, spec, bufs
	return nil
}

// DecodeState reads a loaded checkpoint's state.json.
func DecodeState(ck *Checkpoint) (*State, error) {
	var saved State
	if err := json.Unmarshal(ck.State, &saved); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: state.json: %w", ck.Path, err)
	}
	return &saved, nil
}

// CheckTrajectory refuses to resume from a checkpoint of another trajectory. A checkpoint with a
// trajectory config is compared key by key (config.DiffTrajectory), and the refusal names each
// key with the checkpoint's value and this run's. One from a build before the trajectory config
// (a hash of the whole config, HashV1) is accepted when this config's HashV1 is the same; that
// build recorded nothing to say which key differs, so the refusal says so.
func CheckTrajectory(saved *State, cfg *config.Config, where string, world int) error {
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
