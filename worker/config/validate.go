package config

// validate.go: derived defaults (Resolved) and the checks (Validate), kept apart: Resolved returns
// a new Config, Validate changes nothing.

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// minLRFromLR is train.min_lr before Resolved: "lr/10".
const minLRFromLR = -1

// Resolved returns a copy of c with the defaults that depend on other keys filled in; c is not
// changed. There is one: train.min_lr, when negative (Default's minLRFromLR), becomes lr/10.
func (c *Config) Resolved() *Config {
	r := c.Clone()
	if r.Train.MinLR < 0 {
		r.Train.MinLR = r.Train.LR / 10
	}
	return r
}

// recheck is v's parse error, or nil.
func recheck[T ~string](v T, parse func(string) (T, error)) error {
	_, err := parse(string(v))
	return err
}

// Validate checks every value and the combinations that matter, without
// changing c (call it on a Resolved config). Errors name the key and what it
// should be; all problems are reported at once, section by section in the
// order of the schema.
func (c *Config) Validate() error {
	var p problems
	p.choice(recheck(c.Precision, ParsePrecision))
	c.validateModel(&p)
	c.validateTrain(&p)
	c.validateData(&p)
	c.validateCheckpoint(&p)
	c.validateDDP(&p)
	c.validateLossScale(&p)
	c.validateMetrics(&p)
	if len(p) > 0 {
		return errors.New("config: " + strings.Join(p, "; "))
	}
	return nil
}

// problems collects what Validate finds, in order: each names a key and what it should be.
type problems []string

// bad records a problem with key.
func (p *problems) bad(key string, format string, args ...any) {
	*p = append(*p, key+": "+fmt.Sprintf(format, args...))
}

// choice records a choice's parse error, if any. A choice is parsed when it is decoded; it is
// checked again here for a Config built in Go.
func (p *problems) choice(err error) {
	if err != nil {
		*p = append(*p, err.Error())
	}
}

// validateModel checks model.*: each kind's sizes, and the keys only some kinds or attention
// modes take.
func (c *Config) validateModel(p *problems) {
	m := c.Model
	p.choice(recheck(m.Kind, ParseModelKind))
	switch m.Kind {
	case ModelMLP:
		if len(m.Widths) < 2 {
			p.bad("model.widths", "%v: an MLP needs at least input and output widths", m.Widths)
		}
		for i, w := range m.Widths {
			if w <= 0 {
				p.bad("model.widths", "width %d is %d: want > 0", i, w)
			}
		}
		p.choice(recheck(m.Activation, ParseActivation))
	case ModelGPT:
		for _, kv := range []struct {
			k string
			v int
		}{{"model.layers", m.Layers}, {"model.width", m.Width}, {"model.heads", m.Heads}, {"model.context", m.Context}, {"model.vocab", m.Vocab}} {
			if kv.v <= 0 {
				p.bad(kv.k, "%d: want > 0 for a gpt model", kv.v)
			}
		}
		if m.Heads > 0 && m.Width%m.Heads != 0 {
			p.bad("model.width", "%d is not divisible by model.heads %d", m.Width, m.Heads)
		}
		if m.VocabUsed < 0 || m.VocabUsed > m.Vocab {
			p.bad("model.vocab_used", "%d: want 0 (= model.vocab) or up to model.vocab %d", m.VocabUsed, m.Vocab)
		}
	case ModelResNet:
		if m.Depth != 18 && m.Depth != 34 && m.Depth != 50 {
			p.bad("model.depth", "%d: want 18, 34 or 50 for a resnet", m.Depth)
		}
		if m.Stem != "" && m.Stem != "imagenet" && m.Stem != "small" {
			p.bad("model.stem", "%q: want imagenet or small (or leave it out: chosen by the input size)", m.Stem)
		}
		if m.Layout != "" && m.Layout != "nchw" && m.Layout != "nhwc" {
			p.bad("model.layout", "%q: want nchw or nhwc (or leave it out: nchw)", m.Layout)
		}
		if m.Width <= 0 {
			p.bad("model.width", "%d: want > 0 base channels for a resnet (64 for the real ResNets)", m.Width)
		}
		if m.Classes <= 0 {
			p.bad("model.classes", "%d: want > 0 for a resnet", m.Classes)
		}
	}
	switch {
	case m.FlashForwardRows != 0 && m.FlashForwardRows != 64 && m.FlashForwardRows != 128:
		p.bad("model.flash_forward_rows", "%d: want 64 or 128", m.FlashForwardRows)
	case m.FlashForwardRows != 0 && m.Kind != ModelGPT:
		p.bad("model.flash_forward_rows", "%d: only a gpt model has the fused attention", m.FlashForwardRows)
	}
	if m.Kind != ModelGPT && m.GemmEpilogue {
		p.bad("model.gemm_epilogue", "true: only a gpt model's MLP has the fused epilogues")
	}
	if m.Kind != ModelGPT && m.VocabUsed != 0 {
		p.bad("model.vocab_used", "%d: only a gpt model has a vocabulary", m.VocabUsed)
	}
	if m.Dropout < 0 || m.Dropout >= 1 {
		p.bad("model.dropout", "%g: want 0 <= p < 1", m.Dropout)
	}
	if m.Checkpoint.Every < 0 {
		p.bad("model.checkpoint", "period %d: want none, blocks or every_N (N >= 1)", m.Checkpoint.Every)
	}
	if m.Checkpoint.Every == 0 && m.CheckpointKeepAttention {
		p.bad("model.checkpoint_keep_attention", "true without checkpointing: set model.checkpoint to blocks or every_N")
	}
	if attn, err := ParseAttention(string(m.Attention)); err != nil {
		p.choice(err)
	} else if attn == AttnFlash && m.Dropout > 0 {
		p.bad("model.attention", "flash has no attention dropout: set model.dropout 0 or model.attention auto")
	}
}

// validateTrain checks train.*: the run's length, the batch, the optimizer and its schedule,
// the intervals.
func (c *Config) validateTrain(p *problems) {
	t := c.Train
	if t.Epochs < 0 {
		p.bad("train.epochs", "%d: want >= 0", t.Epochs)
	}
	if t.MaxSteps < 0 {
		p.bad("train.max_steps", "%d: want >= 0", t.MaxSteps)
	}
	if t.Epochs == 0 && t.MaxSteps == 0 {
		p.bad("train.epochs", "train.epochs and train.max_steps are both 0: set one")
	}
	if !t.MicroBatchAuto && t.MicroBatch < 0 {
		p.bad("train.micro_batch", "%d: want > 0 or \"auto\"", t.MicroBatch)
	}
	if !t.MicroBatchAuto && t.MicroBatch == 0 && t.GlobalBatch == 0 {
		p.bad("train.micro_batch", "not set: give train.micro_batch (a number or \"auto\") or train.global_batch")
	}
	if t.GlobalBatch < 0 {
		p.bad("train.global_batch", "%d: want >= 0", t.GlobalBatch)
	}
	if t.GradAccumSteps < 0 {
		p.bad("train.grad_accum_steps", "%d: want >= 0", t.GradAccumSteps)
	}
	if t.LR <= 0 {
		p.bad("train.lr", "%g: want > 0", t.LR)
	}
	if t.MinLR < 0 || t.MinLR > t.LR {
		p.bad("train.min_lr", "%g: want 0 <= min_lr <= train.lr (%g)", t.MinLR, t.LR)
	}
	p.choice(recheck(t.Schedule, ParseSchedule))
	if t.WarmupSteps < 0 {
		p.bad("train.warmup_steps", "%d: want >= 0", t.WarmupSteps)
	}
	p.choice(recheck(t.Optimizer, ParseOptimizer))
	if t.WeightDecay < 0 {
		p.bad("train.weight_decay", "%g: want >= 0", t.WeightDecay)
	}
	if t.Momentum < 0 || t.Momentum >= 1 {
		p.bad("train.momentum", "%g: want 0 <= momentum < 1", t.Momentum)
	}
	if t.Nesterov && t.Momentum == 0 && t.Optimizer == OptSGD {
		p.bad("train.nesterov", "true needs train.momentum > 0")
	}
	if t.Beta1 < 0 || t.Beta1 >= 1 {
		p.bad("train.beta1", "%g: want 0 <= beta1 < 1", t.Beta1)
	}
	if t.Beta2 < 0 || t.Beta2 >= 1 {
		p.bad("train.beta2", "%g: want 0 <= beta2 < 1", t.Beta2)
	}
	if t.Eps <= 0 {
		p.bad("train.eps", "%g: want > 0", t.Eps)
	}
	if t.GradClip < 0 {
		p.bad("train.grad_clip", "%g: want >= 0 (0 = off)", t.GradClip)
	}
	if t.LogEvery <= 0 {
		p.bad("train.log_every", "%d: want > 0", t.LogEvery)
	}
	if t.EvalEvery < 0 {
		p.bad("train.eval_every", "%d: want >= 0", t.EvalEvery)
	}
	if t.EvalBatches < 0 {
		p.bad("train.eval_batches", "%d: want >= 0", t.EvalBatches)
	}
	if t.MemoryBudget.Bytes < 0 {
		p.bad("train.memory_budget", "%d bytes: want >= 0", t.MemoryBudget.Bytes)
	}
}

// validateData checks data.* and that the data set suits the model.
func (c *Config) validateData(p *problems) {
	m := c.Model
	d := c.Data
	p.choice(recheck(d.Kind, ParseDataKind))
	switch {
	case m.Kind == ModelGPT && d.Kind == DataMNIST:
		p.bad("data.kind", "mnist with model.kind gpt: a gpt model trains on text")
	case m.Kind == ModelMLP && (d.Kind == DataText || d.Kind == DataTokens || d.Kind == DataSyntheticTokens):
		p.bad("data.kind", "%s with model.kind mlp: an mlp trains on mnist", d.Kind)
	case m.Kind != ModelResNet && (d.Kind == DataSyntheticImages || d.Kind == DataImageFolder):
		p.bad("data.kind", "%s with model.kind %s: these images are for a resnet", d.Kind, m.Kind)
	case m.Kind == ModelResNet && (d.Kind == DataText || d.Kind == DataTokens || d.Kind == DataSyntheticTokens):
		p.bad("data.kind", "%s with model.kind resnet: a resnet trains on images (mnist, synthetic-images, image_folder)", d.Kind)
	case m.Kind == ModelResNet && d.Kind == DataMNIST && m.Classes > 0 && m.Classes != 10:
		p.bad("model.classes", "%d: MNIST has 10 classes", m.Classes)
	case m.Kind == ModelMLP && d.Kind == DataMNIST && len(m.Widths) >= 2:
		if m.Widths[0] != 784 || m.Widths[len(m.Widths)-1] != 10 {
			p.bad("model.widths", "%v: MNIST needs 784 inputs and 10 outputs", m.Widths)
		}
	case m.Kind == ModelGPT && d.Kind == DataText && m.Vocab > 0 && m.Vocab < 256:
		p.bad("model.vocab", "%d: byte-level text needs 256", m.Vocab)
	case m.Kind == ModelGPT && d.Kind == DataText && m.VocabUsed > 0 && m.VocabUsed < 256:
		p.bad("model.vocab_used", "%d: byte-level text uses 256 ids", m.VocabUsed)
	}
	if d.Kind == DataTokens && d.Path == "" {
		p.bad("data.path", "empty: data.kind tokens needs the shards' directory or a glob (`ddpbench tokenize` writes them; `make opticks-tokens` the Opticks ones)")
	}
	if d.Kind == DataSyntheticTokens && d.Path != "" {
		p.bad("data.path", "%s: data.kind synthetic-tokens reads nothing (leave data.path empty)", d.Path)
	}
	if d.Kind == DataImageFolder && d.Path == "" {
		p.bad("data.path", "empty: data.kind image_folder needs ROOT, with ROOT/train/CLASS/*.jpg|png and ROOT/val/CLASS/… (`ddpbench images --from-mnist DIR` writes MNIST so)")
	}
	if d.ImageSize < 0 {
		p.bad("data.image_size", "%d: want > 0 (or 0 for 224)", d.ImageSize)
	}
	if d.ImageSize != 0 && d.Kind != DataImageFolder {
		p.bad("data.image_size", "%d: only data.kind image_folder has an image size", d.ImageSize)
	}
	p.choice(recheck(d.UploadAhead, ParseUploadAhead))
	if d.SyntheticPool < 0 {
		p.bad("data.synthetic_pool", "%d: want >= 0 (0: every sample drawn)", d.SyntheticPool)
	}
	if d.SyntheticPool != 0 && d.Kind != DataSyntheticImages {
		p.bad("data.synthetic_pool", "%d: only data.kind synthetic-images has a pool", d.SyntheticPool)
	}
	for _, ms := range []struct {
		key string
		v   []float64
	}{{"data.mean", d.Mean}, {"data.std", d.Std}} {
		if len(ms.v) == 0 {
			continue
		}
		if d.Kind != DataImageFolder {
			p.bad(ms.key, "%v: only data.kind image_folder is normalised by the config", ms.v)
		} else if len(ms.v) != 3 {
			p.bad(ms.key, "%v: want 3 values (R, G, B)", ms.v)
		}
	}
	for _, v := range d.Std {
		if !(v > 0) {
			p.bad("data.std", "%v: want every value > 0", d.Std)
			break
		}
	}
	if d.Workers < 1 {
		p.bad("data.workers", "%d: want >= 1", d.Workers)
	}
	if d.Prefetch < 1 {
		p.bad("data.prefetch", "%d: want >= 1", d.Prefetch)
	}
	if d.EvalFraction <= 0 || d.EvalFraction >= 1 {
		p.bad("data.eval_fraction", "%g: want 0 < f < 1", d.EvalFraction)
	}
}

// validateCheckpoint checks checkpoint.*.
func (c *Config) validateCheckpoint(p *problems) {
	if c.Checkpoint.Every < 0 {
		p.bad("checkpoint.every", "%d: want >= 0", c.Checkpoint.Every)
	}
	if c.Checkpoint.Keep < 1 {
		p.bad("checkpoint.keep", "%d: want >= 1", c.Checkpoint.Keep)
	}
}

// validateDDP checks ddp.*.
func (c *Config) validateDDP(p *problems) {
	if c.DDP.BucketCapMB <= 0 {
		p.bad("ddp.bucket_cap_mb", "%g: want > 0", c.DDP.BucketCapMB)
	}
	p.choice(recheck(c.DDP.Wire, ParseWire))
	if c.DDP.Channels < 1 || c.DDP.Channels > 16 {
		p.bad("ddp.channels", "%d: want 1 to 16", c.DDP.Channels)
	}
	p.choice(c.DDP.validateIntraHost())
	p.choice(c.validateCopies())
	p.choice(recheck(c.DDP.OverlapGather, ParseOverlapGather))
	p.choice(recheck(c.DDP.ShardMaster, ParseShardMaster))
	p.choice(recheck(c.DDP.ShardGather, ParseShardGather))
	p.choice(recheck(c.DDP.ShardReduce, ParseShardReduce))
	if c.DDP.ShardReduce == ShardReduceDevice && !c.DDP.ShardOptimizer {
		p.bad("ddp.shard_reduce", "device needs ddp.shard_optimizer: true (it reduce-scatters the shards' gradients)")
	}
	if c.DDP.ShardGather == ShardGatherDevice && !c.DDP.ShardOptimizer {
		p.bad("ddp.shard_gather", "device needs ddp.shard_optimizer: true (it gathers the shards' updated weights)")
	}
	if c.DDP.ShardMaster == ShardMasterOn && !c.DDP.ShardOptimizer {
		p.bad("ddp.shard_master", "on needs ddp.shard_optimizer: true (the master is sharded with the optimizer state)")
	}
	if c.DDP.ShardMaster == ShardMasterOn && c.Precision == FP32 {
		p.bad("ddp.shard_master", "on under precision fp32: forward reads the f32 master as the weights, so every rank needs it whole (fp16 or bf16 keep a 16-bit copy for forward)")
	}
	if c.DDP.CheckEvery < 0 {
		p.bad("ddp.check_every", "%d: want >= 0 (0 = only at the end)", c.DDP.CheckEvery)
	}
}

// validateLossScale checks loss_scale.*: the dynamic loss scaler of fp16.
func (c *Config) validateLossScale(p *problems) {
	ls := c.LossScale
	if ls.Init <= 0 {
		p.bad("loss_scale.init", "%g: want > 0", ls.Init)
	}
	if ls.GrowthInterval < 1 {
		p.bad("loss_scale.growth_interval", "%d: want >= 1", ls.GrowthInterval)
	}
	if ls.GrowthFactor < 1 {
		p.bad("loss_scale.growth_factor", "%g: want >= 1", ls.GrowthFactor)
	}
	if ls.Backoff <= 0 || ls.Backoff >= 1 {
		p.bad("loss_scale.backoff", "%g: want 0 < backoff < 1", ls.Backoff)
	}
	if ls.Min <= 0 || ls.Min > ls.Init {
		p.bad("loss_scale.min", "%g: want 0 < min <= loss_scale.init (%g)", ls.Min, ls.Init)
	}
}

// validateMetrics checks metrics.listen, the Prometheus address.
func (c *Config) validateMetrics(p *problems) {
	if l := c.Metrics.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil {
			p.bad("metrics.listen", "%q: want host:port, e.g. :9100 or 127.0.0.1:9100", l)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			p.bad("metrics.listen", "%q: port %q: want 0 to 65535", l, port)
		}
	}
}
