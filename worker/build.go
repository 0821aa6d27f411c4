package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
)

// deviceOpeners are the devices this binary can drive; the CUDA build adds "cuda"
// (device_cuda.go).
var deviceOpeners = map[string]func(localRank int) (tensor.Device, error){
	"cpu": func(int) (tensor.Device, error) { return cpu.New(), nil },
}

// autoDevice picks the device for --device auto: "cpu" here; the CUDA build (device_cuda.go)
// answers "cuda" when a GPU is visible.
var autoDevice = func() string { return "cpu" }

// OpenDevice opens the named device ("cpu", "cuda", or "auto": a GPU when this build has the CUDA
// device and one is visible, else the CPU) for the worker with this LOCAL_RANK. "" is the CPU (the
// library's default; ddptrain's --device defaults to auto).
func OpenDevice(name string, localRank int) (tensor.Device, error) {
	switch name {
	case "":
		name = "cpu"
	case "auto":
		name = autoDevice()
	}
	open, ok := deviceOpeners[name]
	if !ok {
		var have []string
		for k := range deviceOpeners {
			have = append(have, k)
		}
		sort.Strings(have)
		hint := ""
		if name == "cuda" {
			hint = " (this binary was built without the cuda tag: make cuda)"
		}
		return nil, fmt.Errorf("worker: --device %q is not available%s; this build has: %s", name, hint, strings.Join(have, ", "))
	}
	return open(localRank)
}

// loadData returns the training and evaluation sets of cfg's data section.
func loadData(cfg *Config, spec model.Spec) (train, eval data.Dataset, err error) {
	switch cfg.Data.Kind {
	case "mnist":
		tr, te, err := data.LoadMNIST(cfg.Data.Path)
		if err != nil {
			return nil, nil, err
		}
		in := spec.Input()
		if c, h, w, ok := in.Image(); ok {
			// (1,28,28) images, the same X as the MLP's read as NCHW; training samples get a
			// random crop (pad 2, crop 28) in the loader's workers. No flip: digits are not
			// mirror-symmetric.
			return data.RandomCrop(tr, c, h, w, 2, uint64(cfg.Seed)), te, nil
		}
		if tr.Features != in.Features() {
			return nil, nil, fmt.Errorf("worker: model.widths[0] is %d but MNIST images have %d pixels", in.Features(), tr.Features)
		}
		return tr, te, nil
	case "synthetic-images":
		c, h, w := imageShape(cfg)
		seed := uint64(cfg.Seed)
		pool := cfg.Data.SyntheticPool // 0: every sample drawn in Fill
		return data.NewSyntheticImages(12800, c, h, w, cfg.Model.Classes, seed).WithPool(pool),
			data.NewSyntheticImages(1280, c, h, w, cfg.Model.Classes, seed^1).WithPool(pool), nil
	case "image_folder":
		tr, te, err := data.LoadImageFolder(cfg.Data.Path, imageFolderConfig(cfg))
		if err != nil {
			return nil, nil, err
		}
		if len(tr.Classes) != cfg.Model.Classes {
			return nil, nil, fmt.Errorf("worker: model.classes is %d but the image folder %s has %d classes (%s …)", cfg.Model.Classes, cfg.Data.Path, len(tr.Classes), tr.Classes[0])
		}
		return tr, te, nil
	case "text":
		tr, te, err := data.LoadText(cfg.Data.Path, cfg.Data.EvalFraction)
		if err != nil {
			return nil, nil, err
		}
		return tr.WithContext(cfg.Model.Context), te.WithContext(cfg.Model.Context), nil
	case "synthetic-tokens":
		// Uniform ids over the vocabulary the model reads (vocab_used where set), a function of
		// (seed, window) only: the inputs of PyTorch's GPT-2 benchmark, for like-for-like steps.
		seed := uint64(cfg.Seed)
		tr, err := data.NewSyntheticTokens(synthTokenWindows, cfg.Model.Context, vocabTokens(cfg), seed)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: %w", err)
		}
		te, err := data.NewSyntheticTokens(synthTokenWindows/100, cfg.Model.Context, vocabTokens(cfg), seed^1)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: %w", err)
		}
		return tr, te, nil
	case "tokens":
		// Memory-mapped; every id checked against the tokenizer's vocabulary (a shard that is
		// truncated, of another format or out of vocabulary is refused naming the file).
		if m, _ := filepath.Glob(cfg.Data.Path); len(m) == 0 {
			wd, _ := os.Getwd()
			return nil, nil, fmt.Errorf("worker: data.path %s: no such directory or files (relative paths are from %s): `make opticks-tokens` writes the Opticks shards to data/opticks-gpt2, `ddpbench tokenize` others", cfg.Data.Path, wd)
		}
		tr, te, err := data.LoadTokens(cfg.Data.Path, vocabTokens(cfg), cfg.Model.Context)
		if err != nil {
			return nil, nil, err
		}
		if te == nil {
			tr.Close()
			return nil, nil, fmt.Errorf("worker: data.path %s has train shards but no eval shards (*_val_*.bin): tokenize with --eval-fraction, e.g. 0.1", cfg.Data.Path)
		}
		return tr, te, nil
	}
	return nil, nil, fmt.Errorf("worker: data.kind %q: want mnist, text, tokens, synthetic-tokens, synthetic-images or image_folder", cfg.Data.Kind)
}

// imageFolderConfig is data.kind image_folder's transform: data.image_size (0 = 224) and
// data.mean/std (empty = ImageNet's), the augmentation seeded by the run's seed.
func imageFolderConfig(cfg *Config) data.ImageFolderConfig {
	ic := data.ImageFolderConfig{Size: imageFolderSize(cfg), Mean: data.ImageNetMean, Std: data.ImageNetStd, Seed: uint64(cfg.Seed)}
	for c := range 3 {
		if len(cfg.Data.Mean) == 3 {
			ic.Mean[c] = float32(cfg.Data.Mean[c])
		}
		if len(cfg.Data.Std) == 3 {
			ic.Std[c] = float32(cfg.Data.Std[c])
		}
	}
	return ic
}

func imageFolderSize(cfg *Config) int {
	if cfg.Data.ImageSize > 0 {
		return cfg.Data.ImageSize
	}
	return 224
}

// vocabTokens is the tokenizer's vocabulary: model.vocab_used, or model.vocab.
func vocabTokens(cfg *Config) int {
	if cfg.Model.VocabUsed > 0 {
		return cfg.Model.VocabUsed
	}
	return cfg.Model.Vocab
}

// ModelSpec is the one description of cfg's model (model.Spec), derived from the config once:
// the architecture every checkpoint carries, with the padded vocabulary and the inputs'
// normalisation, which the model alone does not know, and how this process runs it (the compute
// dtype, checkpointing, the attention path). model.New builds the model from it.
func ModelSpec(cfg *Config) (model.Spec, error) {
	var s model.Spec
	switch cfg.Model.Kind {
	case "gpt":
		s = gptConfig(cfg).Spec()
		s.VocabUsed = cfg.Model.VocabUsed
	case "mlp":
		s = mlpConfig(cfg).Spec()
	case "resnet":
		s = resnetConfig(cfg).Spec()
	default:
		return model.Spec{}, fmt.Errorf("worker: model.kind %q: want mlp, gpt or resnet", cfg.Model.Kind)
	}
	switch cfg.Data.Kind {
	case "mnist":
		s.InputNormalization = fmt.Sprintf("(x/255 - %g)/%g", data.MNISTMean, data.MNISTStd)
	case "text":
		s.InputNormalization = "none (byte values as token ids)"
	case "synthetic-images":
		s.InputNormalization = "none (synthetic noise images)"
	case "image_folder":
		ic := imageFolderConfig(cfg)
		s.InputNormalization = fmt.Sprintf("RGB (x/255 - %v)/%v per channel; eval: resize the shorter side to %d, centre crop %d",
			ic.Mean, ic.Std, int(float64(ic.Size)/0.875+0.5), ic.Size)
	default:
		s.InputNormalization = "none (token ids)"
	}
	return s, nil
}

// computeDType is the dtype of activations and the weight copy matmuls read.
func computeDType(cfg *Config) tensor.DType {
	switch cfg.Precision {
	case config.FP16:
		return tensor.F16
	case config.BF16:
		return tensor.BF16
	}
	return tensor.F32
}

// buildModel builds cfg's model: model.New of ModelSpec, seeded with the run's seed.
func buildModel(dev tensor.Device, cfg *Config) (model.Model, error) {
	spec, err := ModelSpec(cfg)
	if err != nil {
		return nil, err
	}
	return model.New(dev, spec, uint64(cfg.Seed))
}

// synthTokenWindows is data.kind synthetic-tokens' training windows (its eval set has a
// hundredth): drawn when filled, so their number costs nothing but the epoch's length.
const synthTokenWindows = 100_000

// imageShape is one input image (C,H,W) of an image model: MNIST's 1×28×28, ImageNet's
// 3×224×224 for synthetic images, 3×image_size² for an image folder (grey images as RGB).
func imageShape(cfg *Config) (c, h, w int) {
	if cfg.Data.Kind == "synthetic-images" {
		return 3, 224, 224
	}
	if cfg.Data.Kind == "image_folder" {
		s := imageFolderSize(cfg)
		return 3, s, s
	}
	return 1, 28, 28
}

// buffersHash is the sha256 of m's buffers (model.HashF32 of the slab), "" without any.
func buffersHash(m model.Model) string {
	if b, ok := m.(model.Buffered); ok && b.Buffers().Data != nil {
		return model.HashF32(tensor.ToHost(b.Buffers().Data))
	}
	return ""
}

// modelBuffers are a model's buffers (BatchNorm running statistics), nil for none: broadcast
// from rank 0 with the parameters at the start and after every optimizer step.
func modelBuffers(m model.Model) []*tensor.Tensor {
	if b, ok := m.(model.Buffered); ok && b.Buffers().Data != nil {
		return []*tensor.Tensor{b.Buffers().Data}
	}
	return nil
}

func mlpConfig(cfg *Config) model.MLPConfig {
	return model.MLPConfig{Widths: cfg.Model.Widths, Activation: string(cfg.Model.Activation),
		Dropout: float32(cfg.Model.Dropout), Compute: computeDType(cfg), Checkpoint: cfg.Model.Checkpoint.Every}
}

// resnetConfig is cfg's ResNet; model.stem left out is chosen by the input size: "small" for
// images of at most 64 pixels across, else "imagenet".
func resnetConfig(cfg *Config) model.ResNetConfig {
	c, h, w := imageShape(cfg)
	stem := cfg.Model.Stem
	if stem == "" {
		stem = "imagenet"
		if w <= 64 {
			stem = "small"
		}
	}
	return model.ResNetConfig{Depth: cfg.Model.Depth, Stem: stem, Width: cfg.Model.Width, Classes: cfg.Model.Classes,
		InC: c, InH: h, InW: w, Compute: computeDType(cfg), Checkpoint: cfg.Model.Checkpoint.Every, Layout: imageLayout(cfg)}
}

// imageLayout is model.layout's (validated: "" or an unknown value is NCHW).
func imageLayout(cfg *Config) tensor.Layout {
	l, _ := tensor.ParseLayout(cfg.Model.Layout)
	return l
}

func gptConfig(cfg *Config) model.GPTConfig {
	return model.GPTConfig{Layers: cfg.Model.Layers, Width: cfg.Model.Width, Heads: cfg.Model.Heads,
		Context: cfg.Model.Context, Vocab: cfg.Model.Vocab, Tied: cfg.Model.Tied, Dropout: float32(cfg.Model.Dropout),
		Compute: computeDType(cfg), Checkpoint: cfg.Model.Checkpoint.Every, Attention: attentionMode(cfg.Model.Attention),
		CheckpointKeepAttn: cfg.Model.CheckpointKeepAttention, GemmEpilogue: cfg.Model.GemmEpilogue}
}

// printSettings logs the run's settings once, as an aligned table.
func printSettings(cfg *Config, spec model.Spec, env Env, dev tensor.Device, ps *model.Params, total, perEpoch int, eng *ddp.Engine) {
	rows := [][2]string{
		{"model", spec.Summary()},
		{"parameters", fmt.Sprintf("%d (%s f32)", ps.N, tensor.FormatBytes(int64(ps.N)*4))},
		{"precision", string(cfg.Precision)},
		{"device", dev.Name()},
		{"world size", fmt.Sprint(env.WorldSize)},
		{"batch", fmt.Sprintf("global %d = micro %d × accum %d × world %d", cfg.Train.GlobalBatch, cfg.Train.MicroBatch, cfg.Train.GradAccumSteps, env.WorldSize)},
		{"steps", fmt.Sprintf("%d (%d per epoch)", total, perEpoch)},
		{"optimizer", fmt.Sprintf("%s lr %g (%s schedule)", cfg.Train.Optimizer, cfg.Train.LR, cfg.Train.Schedule)},
		{"data", fmt.Sprintf("%s %s", cfg.Data.Kind, cfg.Data.Path)},
	}
	if cfg.Model.InitFrom != "" {
		rows = append(rows, [2]string{"init from", cfg.Model.InitFrom})
	}
	if env.WorldSize > 1 {
		rows = append(rows, [2]string{"ddp", fmt.Sprintf("wire %s, %d buckets of ≤ %g MiB", cfg.WireFormat(), len(eng.Buckets()), cfg.DDP.BucketCapMB)})
	}
	var b strings.Builder
	b.WriteString("settings:\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-12s %s\n", r[0], r[1])
	}
	fmt.Fprint(os.Stderr, b.String())
}

// Optimizer, Scaler and ScalerState are the model package's, named here for the loop's signatures.
type (
	Optimizer   = model.Optimizer
	Scaler      = model.Scaler
	ScalerState = model.ScalerState
)

// optimizerShardFor is this rank's shard under ddp.shard_optimizer (ddp.PlanShard: the engine
// plans the same from the same buckets), nil when unsharded or alone. On any device: on CUDA
// (the user's choice of the key; measured on H200s and H100s: docs/perf-memory.md) the optimizer state lives on the device
// and the engine takes the staged path under fp16 (ddp/shard_gpu.go), else its host path.
func optimizerShardFor(cfg *Config, env Env, ps *model.Params) *model.Shard {
	if !cfg.DDP.ShardOptimizer || env.WorldSize <= 1 {
		return nil
	}
	return ddp.PlanShard(ps, cfg.DDP.BucketCapMB, env.WorldSize, env.Rank)
}

// buildOptimizer builds train.optimizer over ps; shard (ddp.shard_optimizer) keeps the
// optimizer's state (AdamW's m and v, SGD's momentum) for those elements only.
func buildOptimizer(cfg *Config, ps *model.Params, shard *model.Shard) (Optimizer, error) {
	t := cfg.Train
	switch t.Optimizer {
	case "adamw":
		return model.NewAdamWShard(ps, model.AdamWConfig{Beta1: float32(t.Beta1), Beta2: float32(t.Beta2), Eps: float32(t.Eps), WeightDecay: float32(t.WeightDecay)}, shard)
	case "sgd":
		return model.NewSGDShard(ps, model.SGDConfig{Momentum: float32(t.Momentum), Nesterov: t.Nesterov, WeightDecay: float32(t.WeightDecay)}, shard)
	}
	return nil, fmt.Errorf("worker: train.optimizer %q: want adamw or sgd", t.Optimizer)
}

// optimizerTensors are the optimizer's state tensors (broadcast from rank 0 after a resume).
func optimizerTensors(o Optimizer) []*tensor.Tensor {
	var ts []*tensor.Tensor
	for _, s := range o.State() {
		ts = append(ts, s.T)
	}
	return ts
}

// buildScaler: dynamic loss scaling under fp16; a disabled scaler (scale 1) under fp32, and
// under bf16 one that checks every step's gradients for inf/NaN (an error, not a skipped step).
func buildScaler(dev tensor.Device, cfg *Config) (*Scaler, error) {
	ls := cfg.LossScale
	return model.NewScaler(dev, model.ScalerConfig{Enabled: cfg.Precision == config.FP16, CheckFinite: cfg.Precision == config.BF16, Init: float32(ls.Init),
		Growth: float32(ls.GrowthFactor), Backoff: float32(ls.Backoff), Interval: ls.GrowthInterval, MinScale: float32(ls.Min)})
}

func buildSchedule(cfg *Config, total int) (model.Schedule, error) {
	t := cfg.Train
	return model.NewSchedule(model.ScheduleConfig{Kind: string(t.Schedule), LR: float32(t.LR), MinLR: float32(t.MinLR),
		Warmup: int64(t.WarmupSteps), Total: int64(max(total, t.WarmupSteps+1))})
}

// shardMaster is ddp.shard_master resolved for the optimizer's shard (nil: unsharded or alone,
// never). Under fp16 and bf16 only (fp32's forward reads the f32 master: the config refuses on
// there). auto is on where it has run: the CPU device (tensor.HostMemory), and --device cuda
// under fp16 (the whole -tags cuda suite passed with it on an H100 in session 17; stage 3's rows:
// the step time of the whole master's, 0.23-0.35 GiB less a rank); cuda under bf16 has not run,
// so on is the user's choice there. docs/perf-memory.md.
func (t *Trainer) shardMaster(shard *model.Shard) bool {
	if shard == nil || t.cfg.Precision == config.FP32 {
		return false
	}
	switch config.ShardMaster(t.cfg.DDP.ShardMaster) {
	case config.ShardMasterOn:
		return true
	case config.ShardMasterOff:
		return false
	}
	_, host := t.dev.(tensor.HostMemory)
	return host || t.cfg.Precision == config.FP16
}

// uploadAhead is data.upload_ahead resolved: auto is on where the device copies while it
// computes (not tensor.HostMemory: --device cuda, where an H100 measured ResNet-50's b64 step
// 17.45 -> 16.74 ms in session 17, docs/perf-resnet-gpu.md) and off on the CPU device, whose
// uploads are copies made at once (there it would only cost the second buffers); on works on
// every device.
func uploadAhead(cfg *Config, dev tensor.Device) bool {
	switch config.UploadAhead(cfg.Data.UploadAhead) {
	case config.UploadAheadOn:
		return true
	case config.UploadAheadOff:
		return false
	}
	_, host := dev.(tensor.HostMemory)
	return !host
}

// overlapGather is ddp.overlap_gather resolved. auto is on where the overlap measured faster:
// the CUDA device's staged fp16 path (fp16 on the f16 wire; on an H100, 2026-12-05: GPT-2 small's
// sharded step 81.5 -> 71.5 ms at 2 workers, 163.4 -> 141.0 at 4). Off on the CPU device, where it
// measured within noise (2 cores: the gather and forward share them), and on a device's other
// sharded paths (fp32, bf16: the host buffers), not yet run on a GPU with it. docs/perf-memory.md.
func (t *Trainer) overlapGather() bool {
	switch config.OverlapGather(t.cfg.DDP.OverlapGather) {
	case config.OverlapOn:
		return true
	case config.OverlapOff:
		return false
	}
	_, host := t.dev.(tensor.HostMemory)
	return !host && t.cfg.Precision == config.FP16 && wireOf(t.cfg) == allreduce.WireF16
}
