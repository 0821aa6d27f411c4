package config

// config.go: the schema. Field comments give the YAML key, the unit and the default.

// Config is one training run.
type Config struct {
	// precision: fp32 | fp16 | bf16. fp16 keeps FP32 master weights and
	// optimizer state, runs matmuls and activations in FP16 and scales the
	// loss dynamically (see LossScale). bf16 does the same in bfloat16
	// without a loss scaler: an inf or NaN gradient stops the run with an
	// error naming the step. Default fp32.
	Precision Precision `yaml:"precision"`
	// seed: the one seed of the run: parameter init, dropout and the data
	// order (the shuffle of epoch e is a function of (seed, e)). Default 1.
	Seed int64 `yaml:"seed"`

	Model      ModelConfig      `yaml:"model"`
	Train      TrainConfig      `yaml:"train"`
	Data       DataConfig       `yaml:"data"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	DDP        DDPConfig        `yaml:"ddp"`
	LossScale  LossScaleConfig  `yaml:"loss_scale"`
	Metrics    MetricsConfig    `yaml:"metrics,omitempty"`
}

// ModelConfig is the `model:` section.
type ModelConfig struct {
	// kind: mlp | gpt | resnet.
	Kind ModelKind `yaml:"kind"`
	// widths (MLP): every layer width from input to output, e.g.
	// [784, 512, 256, 10] is three Linear layers.
	Widths []int `yaml:"widths,flow"`
	// activation (MLP): relu | gelu. Default relu.
	Activation Activation `yaml:"activation"`

	// layers, width, heads, context, vocab (GPT): transformer blocks, the
	// residual width C, attention heads (C % heads == 0), the context length T
	// in tokens, and the vocabulary size (256 for byte-level text).
	Layers  int `yaml:"layers"`
	Width   int `yaml:"width"`
	Heads   int `yaml:"heads"`
	Context int `yaml:"context"`
	Vocab   int `yaml:"vocab"`
	// tied (GPT): the output projection reuses the token embedding. Default true.
	Tied bool `yaml:"tied"`
	// vocab_used (GPT): the tokenizer's vocabulary when model.vocab pads it, e.g. GPT-2's 50257
	// ids in a table of 50304 rows (a multiple of 64 for fast matmuls). Token shards are checked
	// against it (an id ≥ vocab_used is refused), checkpoints record it, and `ddptrain export`
	// drops the padding rows. 0 (the default) means model.vocab: nothing is padding.
	VocabUsed int `yaml:"vocab_used,omitempty"`
	// init_from: start from these weights instead of a random init: a safetensors file, a
	// directory holding model.safetensors (a goddp checkpoint step directory, a `ddptrain
	// export`, a Hugging Face GPT-2 model directory, sharded or not), with goddp's or Hugging Face
	// GPT2LMHeadModel's names, in F32, F16 or BF16 (widened to the f32 master weights). The shapes
	// must be the model's (Hugging Face GPT-2 may have fewer vocabulary rows, padded with their
	// mean row, or more positions, cut to model.context); the optimizer starts fresh. Rank 0
	// reads it (the file need only be where rank 0 runs) and broadcasts the weights. Once checkpoint.dir holds
	// a checkpoint the run resumes from that and never reads init_from: the checkpoint's weights
	// supersede it, so init_from is not part of the config hash (Hash) and may change or vanish
	// between a run's restarts; state.json records what it was. Default "" (random init).
	InitFrom string `yaml:"init_from,omitempty"`

	// dropout: probability in [0, 1). Default 0.
	Dropout float64 `yaml:"dropout"`
	// checkpoint: activation checkpointing: none | blocks | every_N. "blocks"
	// keeps only each block's (MLP: stage's) input in forward and recomputes
	// the rest in backward; every_N does that for every N-th block. Default
	// none. Checkpointing.Every is the period as a number.
	Checkpoint Checkpointing `yaml:"checkpoint"`
	// attention (GPT): auto | flash | materialized. flash is the fused kernel
	// that never stores the T×T scores (no attention dropout: needs dropout
	// 0); materialized computes them with batched GEMMs and a softmax. auto
	// (the default, also spelled "") takes flash where the device has a fast
	// kernel for it (the CUDA device, head size 64, fp16) and dropout is 0.
	Attention Attention `yaml:"attention,omitempty"`
	// depth, stem, classes (resnet): 18 | 34 (basic blocks) or 50 (bottleneck
	// blocks); the stem: imagenet (7×7/2 conv + 3×3/2 max pool) or small (3×3/1
	// conv, no pool: 28×28 MNIST), "" = small for inputs up to 64 pixels wide,
	// else imagenet; the classes of the head (MNIST: 10). model.width is the
	// first stage's channels (64 in the real ResNets), doubling per stage;
	// model.checkpoint counts residual blocks.
	Depth   int    `yaml:"depth,omitempty"`
	Stem    string `yaml:"stem,omitempty"`
	Classes int    `yaml:"classes,omitempty"`
	// sync_batchnorm (resnet): the batch statistics of every BatchNorm over all
	// ranks (PyTorch's SyncBatchNorm: per-channel statistics gathered in the
	// forward, Σdy and Σdy·x̂ all-reduced in the backward), so world W × micro
	// batch b normalises as one process with W·b. Default false: statistics per
	// rank. The running statistics are buffers, broadcast from rank 0 at the
	// start and, without sync, after every optimizer step (with sync every rank
	// computes the same ones).
	SyncBatchNorm bool `yaml:"sync_batchnorm,omitempty"`
	// layout (resnet): nchw | nhwc, the activations' layout. nhwc is channels
	// last, what the CUDA device's tensor-core convolutions read (not yet run on
	// a GPU); on the CPU it is the nchw arithmetic between transposes (slower,
	// the same numbers). "" = nchw. The parameters do not depend on it.
	Layout string `yaml:"layout,omitempty"`
	// checkpoint_keep_attention (GPT, with checkpoint): checkpointed blocks also
	// keep the fused attention's output (B×T×width) and log-sum-exp, so the
	// recompute skips the attention kernel (selective checkpointing: more
	// memory than blocks alone, less recompute). Default false.
	CheckpointKeepAttention bool `yaml:"checkpoint_keep_attention,omitempty"`
	// gemm_epilogue (GPT): the blocks' bias adds and bias gradients, and the
	// MLP's GELU, in the GEMMs' epilogues (the CUDA device through cublasLt; the CPU composes the
	// same operations, bit-identical). On the GPU the numbers differ from the
	// separate kernels' in the last bits (tested on the H200, not yet timed). Default false.
	GemmEpilogue bool `yaml:"gemm_epilogue,omitempty"`
	// flash_forward_rows (GPT on --device cuda): the query rows a block of the fused attention's
	// forward kernel owns, 64 (4 warps, the default) or 128 (8 warps: each key/value tile read
	// into shared memory serves twice the queries). The same bits either way. Not yet run on a
	// GPU. 0 = 64.
	FlashForwardRows int `yaml:"flash_forward_rows,omitempty"`
}

// TrainConfig is the `train:` section.
type TrainConfig struct {
	// epochs: passes over the training set. The run ends at whichever of
	// epochs and max_steps comes first; 0 means no limit from that key (but
	// not both 0).
	Epochs int `yaml:"epochs"`
	// max_steps: optimizer steps; 0 = no limit.
	MaxSteps int `yaml:"max_steps"`

	// micro_batch: samples per forward/backward on one rank, or "auto" (find
	// the largest that fits; see memory_budget). In Go: MicroBatch, with
	// MicroBatchAuto set and MicroBatch 0 until the search has run. (Decoded
	// by TrainConfig.UnmarshalYAML, load.go, since it is an int or a string.)
	MicroBatch     int  `yaml:"-"`
	MicroBatchAuto bool `yaml:"-"`
	// global_batch: samples per optimizer step over all ranks.
	//   global_batch = micro_batch × grad_accum_steps × world_size
	// Give any two (or just micro_batch); ResolveBatch (batch.go) finds the third.
	GlobalBatch int `yaml:"global_batch"`
	// grad_accum_steps: micro-batches per optimizer step on each rank; the
	// first k-1 accumulate without communication.
	GradAccumSteps int `yaml:"grad_accum_steps"`

	// lr: peak learning rate. min_lr: the floor of the cosine decay, default
	// lr/10 (filled by Resolved). schedule: constant | cosine (linear warmup
	// over warmup_steps, then cosine from lr to min_lr at the last step).
	LR          float64  `yaml:"lr"`
	MinLR       float64  `yaml:"min_lr"`
	Schedule    Schedule `yaml:"schedule"`
	WarmupSteps int      `yaml:"warmup_steps"`

	// optimizer: adamw | sgd. weight_decay is decoupled for AdamW and L2 for
	// SGD. momentum and nesterov are SGD's; beta1, beta2, eps AdamW's.
	Optimizer   Optimizer `yaml:"optimizer"`
	WeightDecay float64   `yaml:"weight_decay"`
	Momentum    float64   `yaml:"momentum"`
	Nesterov    bool      `yaml:"nesterov"`
	Beta1       float64   `yaml:"beta1"`
	Beta2       float64   `yaml:"beta2"`
	Eps         float64   `yaml:"eps"`
	// grad_clip: clip the global L2 norm of the gradients to this; 0 = off.
	GradClip float64 `yaml:"grad_clip"`

	// log_every: steps between progress/metrics lines. Default 50.
	LogEvery int `yaml:"log_every"`
	// eval_every: steps between evaluations; 0 = at each epoch end.
	EvalEvery int `yaml:"eval_every"`
	// eval_batches: eval batches per evaluation over all ranks; 0 = all.
	EvalBatches int `yaml:"eval_batches"`

	// memory_budget: device bytes micro_batch: auto may use, as "16GiB",
	// "512MiB", "1.5GB" or a plain byte count; "" = the whole device.
	// MemoryBudget.Bytes is the number.
	MemoryBudget ByteSize `yaml:"memory_budget"`
}

// DataConfig is the `data:` section.
type DataConfig struct {
	// kind: mnist | text | tokens | synthetic-images | image_folder. image_folder: a
	// resnet's images in data.path as ROOT/train/CLASS/*.jpg|png and ROOT/val/CLASS/…
	// (torchvision's ImageFolder: classes sorted by name), 3×image_size² samples, decoded on the
	// loader's workers (`ddpbench images --from-mnist DIR` writes MNIST so). tokens: token shards in
	// llm.c's format (`ddpbench tokenize` writes them), memory-mapped; every id
	// must be below model.vocab_used (or model.vocab). synthetic-images: resnet
	// benchmarks (3×224×224 images of noise, 1000 classes, 12800 training and
	// 1280 eval samples).
	Kind DataKind `yaml:"kind"`
	// path: MNIST: the directory holding the idx files; text: the file; tokens:
	// a directory of shards or a glob (*_val_* shards are the eval set, the
	// others the training set). Empty means the default, found by package
	// worker/data: the GoMNIST module's data/ directory, or the Go toolchain's
	// src/testdata/Isaac.Newton-Opticks.txt; tokens has no default.
	Path string `yaml:"path"`
	// workers: goroutines assembling batches. Default 2.
	Workers int `yaml:"workers"`
	// prefetch: batches assembled ahead of the trainer. Default 4.
	Prefetch int `yaml:"prefetch"`
	// eval_fraction (text): the held-out tail's share of the file. Default 0.1.
	// (tokens: the split is by shard; `ddpbench tokenize --eval-fraction` made it.)
	EvalFraction float64 `yaml:"eval_fraction"`
	// shuffle: a fresh permutation every epoch from (seed, epoch). Default true.
	Shuffle bool `yaml:"shuffle"`
	// image_size (image_folder): the square side of every sample; 0 = 224. Training samples are
	// a random resized crop to it (torchvision's defaults) flipped with p = 0.5, eval samples
	// the shorter side resized to image_size/0.875 and centre-cropped.
	ImageSize int `yaml:"image_size,omitempty"`
	// mean, std (image_folder): per-channel (RGB) normalisation of [0,1] pixels, (x−mean)/std;
	// empty = ImageNet's [0.485, 0.456, 0.406] and [0.229, 0.224, 0.225].
	Mean []float64 `yaml:"mean,omitempty"`
	Std  []float64 `yaml:"std,omitempty"`
	// synthetic_pool (synthetic-images): distinct images drawn once and reused, sample i's pixels
	// those of sample i mod synthetic_pool (labels stay per sample); 0 = every sample drawn when
	// its batch is filled (~6 ms of a core per 224² image: a loader bound for a GPU).
	SyntheticPool int `yaml:"synthetic_pool,omitempty"`
	// upload_ahead: auto | on | off. The next micro-batch uploaded to the device while the
	// current one's backward runs (a second set of input buffers: one micro-batch of inputs more
	// on the device), instead of at the start of its own micro-step, where forward waits for it.
	// The same batches, the same bits. auto: on for --device cuda, off on the CPU (worker's
	// uploadAhead). Default auto.
	UploadAhead UploadAhead `yaml:"upload_ahead,omitempty"`
}

// CheckpointConfig is the `checkpoint:` section.
type CheckpointConfig struct {
	// dir: where step-NNNNNNNN/ directories go; "" = no checkpoints.
	Dir string `yaml:"dir"`
	// every: optimizer steps between checkpoints (0 = only at the end).
	Every int `yaml:"every"`
	// keep: newest checkpoints kept; older ones are pruned. Default 2.
	Keep int `yaml:"keep"`
	// per_host: hosts do not share dir (each has its own disk): local rank 0 of every host writes
	// its own copy, not only global rank 0, so any surviving host can restart the job. At resume
	// the ranks always agree on the newest complete checkpoint any of them has and send it to
	// those that lack it (worker/checkpoint/sync.go). dir may contain {node}, replaced by NODE_RANK.
	// Default false.
	PerHost bool `yaml:"per_host"`
	// fresh_if_broken: when dir holds checkpoints but not one of them verifies (every one
	// truncated or corrupted), start from step 0 (model.init_from or a random init) with a
	// warning instead of failing, the broken ones renamed broken-step-NNNNNNNN. Default false: such a run fails naming the broken files, since
	// starting over would silently throw the run's progress away. (A broken checkpoint newer than
	// a good one is always skipped with a warning: the good one is resumed.)
	FreshIfBroken bool `yaml:"fresh_if_broken,omitempty"`
}

// DDPConfig is the `ddp:` section.
type DDPConfig struct {
	// bucket_cap_mb: gradient bucket size in MiB. Default 25.
	BucketCapMB float64 `yaml:"bucket_cap_mb"`
	// wire: auto | f32 | f16 | bf16: the all-reduce wire format; auto
	// follows precision: f16 under fp16, bf16 under bf16, else f32. See
	// Config.WireFormat.
	Wire Wire `yaml:"wire"`
	// check_every: steps between replica-consistency hash checks. Default 100.
	CheckEvery int `yaml:"check_every"`
	// channels: process groups the gradient buckets are dealt over, round-robin, each with its
	// own connections and comm goroutine, so several all-reduces run at once on more cores.
	// Results are bit-identical for any value. Default 1.
	Channels int `yaml:"channels"`
	// shard_optimizer: optimizer-state sharding (ZeRO-1): each rank keeps the optimizer state for
	// its ring segment of every gradient bucket only (about 1/world of them), gradients are
	// reduce-scattered instead of all-reduced and the updated weights all-gathered; on the CPU
	// device the gradients are reduced in place and each rank keeps only its shard's averaged
	// gradient (ZeRO-2, ddp/shard.go). Results are bit-identical to unsharded. adamw (m and v
	// sharded) and sgd (its momentum sharded). On cuda the shard lives on the device and fp16
	// keeps the staged path (ddp/shard_gpu.go; measured on the H200: docs/perf-memory.md). Default false.
	ShardOptimizer bool `yaml:"shard_optimizer,omitempty"`
	// overlap_gather: auto | on | off. Under shard_optimizer, the all-gather of the updated
	// weights after each optimizer step overlaps the next forward (each layer waits for its own
	// bucket, as FSDP's forward prefetch) instead of finishing before it; the same bits either
	// way. auto: on with --device cuda under fp16 on the f16 wire (measured faster on an H100),
	// off otherwise (the CPU: within noise there). Default auto.
	OverlapGather OverlapGather `yaml:"overlap_gather,omitempty"`
	// shard_master: auto | on | off. Under shard_optimizer with precision fp16 or bf16, each rank
	// keeps the f32 master weights of its shard only (plus the norms' gains and biases, which
	// forward reads) instead of the whole master: 4·N·(1−1/world) bytes less per rank; the same
	// bits (model/master_shard.go). auto: on with the CPU device and with --device cuda under fp16
	// (the whole -tags cuda suite ran with it on an H100); bf16 on cuda is the user's on. Refused
	// on under fp32 (forward reads the f32 master as the weights) and without shard_optimizer.
	// Default auto.
	ShardMaster ShardMaster `yaml:"shard_master,omitempty"`
	// shard_gather: auto | host | device. Under shard_optimizer on --device cuda with fp16 on the
	// f16 wire, how the updated f16 weights reach the other ranks each step: host, through pinned
	// memory and the host ring; device, copied between the GPUs of one host over CUDA IPC after
	// one meeting of the ranks (ddp/shard_peer.go; every rank on one host). The same bits. auto:
	// device where it applies (several ranks of one host sharing its one GPU, cuda, fp16 sharded:
	// what was measured; ranks on several GPUs keep host until such a host runs it; 0.94× the
	// unsharded step at W = 2 on an H100, against 1.20× through the host), else host; also host,
	// with a warning, where the devices cannot map each other's memory. Default auto.
	ShardGather ShardGather `yaml:"shard_gather,omitempty"`
	// shard_reduce: auto | host | device. Under shard_optimizer on --device cuda with fp16 on the
	// f16 wire, how each step's f16 gradients are reduce-scattered: host, through pinned memory and
	// the host ring; device, each rank copies its segment of every bucket out of its peers' device
	// staging buffers over CUDA IPC and sums the contributions on its GPU in the ring's order with
	// the ring's roundings (ddp/shard_peer_reduce.go; every rank on one host; run on an H100 shared
	// by 2 and 4 workers). The same bits. auto: device where shard_gather took device on one GPU
	// shared by the ranks (measured: the sharded step 8–9% faster than through the host), else
	// host. Default auto.
	ShardReduce ShardReduce `yaml:"shard_reduce,omitempty"`
	// timeout: how long a collective waits for a silent peer before the job fails (Go duration:
	// 30s, 5m). Default 30s (allreduce.DefaultTimeout). Checkpoint writes do not count against
	// it (they run in the background); raise it for slow networks or very large buckets.
	Timeout Duration `yaml:"timeout,omitempty"`
	// intra_host: auto | host | device | copies: how gradients are reduced among the ranks of one
	// host (issue 34, intrahost.go). host: the host planes (shared memory). device: each
	// bucket all-reduced on the GPU over CUDA IPC buffers (ddp/engine_device.go; --device cuda,
	// several hosts composed with the ring; slower than host where workers share a GPU). copies:
	// the staged f16 all-reduce by copies between the devices of one host (ddp/engine_peer.go;
	// --device cuda, the f16 wire, unsharded; run on an H100 shared by 2 and 4 workers). auto: copies
	// where several ranks of one host share its one GPU and the run is on the unsharded staged
	// path (what was measured), else the host planes; one Info line says which and why. Default auto.
	IntraHost IntraHost `yaml:"intra_host,omitempty"`
	// hierarchical: all-reduce gradients in three rings: reduce-scatter among the ranks of each
	// host, the ring between hosts on each local rank's 1/LOCAL_WORLD_SIZE share, all-gather
	// inside the host (allreduce.Hierarchy). Ranks must be numbered host by host (ddplaunch and
	// torchrun do). The same sums added in another order: within f32 rounding of the flat ring.
	// Default false.
	Hierarchical bool `yaml:"hierarchical,omitempty"`
}

// LossScaleConfig is the `loss_scale:` section: the dynamic loss scaler of
// fp16 runs. The scale starts at init, is multiplied by growth_factor after
// growth_interval steps without overflow, and by backoff on an overflow (that
// step skipped). Falling below min stops training with an error.
type LossScaleConfig struct {
	Init           float64 `yaml:"init"`            // default 65536
	GrowthInterval int     `yaml:"growth_interval"` // default 2000
	GrowthFactor   float64 `yaml:"growth_factor"`   // default 2
	Backoff        float64 `yaml:"backoff"`         // default 0.5
	Min            float64 `yaml:"min"`             // default 1
}

// MetricsConfig is the `metrics:` section: what the run exposes while it trains (none of it is
// part of the trajectory, so none of it is hashed).
type MetricsConfig struct {
	// listen: host:port where every rank serves Prometheus metrics over HTTP (/metrics), e.g.
	// ":9100" or "127.0.0.1:9100"; rank r of a host listens on port + LOCAL_RANK (port 0: a port
	// the system picks, logged). ddptrain --metrics-port N is listen ":N". Default "" (off).
	// docs/metrics.md lists the metrics.
	Listen string `yaml:"listen,omitempty"`
}

// Default returns the defaults every loaded config starts from. Keys
// without a sensible default (model shape, lr, epochs) are zero and Validate
// asks for them. train.min_lr is -1, "lr/10", until Resolved fills it.
func Default() *Config {
	return &Config{
		Precision: FP32,
		Seed:      1,
		Model: ModelConfig{
			Activation: ActReLU,
			Tied:       true,
			Checkpoint: CheckpointNone,
		},
		Train: TrainConfig{
			MinLR:     minLRFromLR, // lr/10, filled by Resolved
			Schedule:  ScheduleConstant,
			Optimizer: OptAdamW,
			Beta1:     0.9,
			Beta2:     0.999,
			Eps:       1e-8,
			LogEvery:  50,
		},
		Data: DataConfig{
			Workers:      2,
			Prefetch:     4,
			EvalFraction: 0.1,
			Shuffle:      true,
		},
		Checkpoint: CheckpointConfig{Keep: 2},
		DDP:        DDPConfig{BucketCapMB: 25, Wire: WireAuto, CheckEvery: 100, Channels: 1},
		LossScale: LossScaleConfig{
			Init: 65536, GrowthInterval: 2000, GrowthFactor: 2, Backoff: 0.5, Min: 1,
		},
	}
}

// Clone returns a deep copy of c (a caller may change it without changing c).
func (c *Config) Clone() *Config {
	cc := *c
	cc.Model.Widths = append([]int(nil), c.Model.Widths...) // nil stays nil
	return &cc
}

// WireFormat resolves ddp.wire: WireF32, WireF16 or WireBF16 (auto: f16 under fp16, bf16 under
// bf16, else f32).
func (c *Config) WireFormat() Wire {
	if c.DDP.Wire == WireAuto || c.DDP.Wire == "" {
		switch c.Precision {
		case FP16:
			return WireF16
		case BF16:
			return WireBF16
		}
		return WireF32
	}
	return c.DDP.Wire
}
