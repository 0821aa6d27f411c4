package config

// hash.go: the trajectory config and its hash. A run's trajectory is the sequence of weights it
// goes through; it depends on the model, the data, the optimizer and its schedule, the precision,
// the seed and the batch (global_batch = micro_batch × grad_accum_steps × world size), and not on
// where files go, how often the run logs, evaluates or checkpoints, or how it uses memory.
// Trajectory is the flat key → value map of the keys that matter, Hash its sha256: ranks and
// hosts compare it to be sure they train the same thing (ddplaunch's rendezvous), a resume to be
// sure it continues the same run, and a checkpoint stores the map, so a refused resume names each
// key that differs with its old and new value (worker/checkpoint/state.go).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// notTrajectory lists every key of the schema the trajectory does not depend on, with why. They
// are left out of Trajectory and so of Hash: a resume may change them. Every other key is part of
// the trajectory. hash_test.go (TestHash_everyKeyIsClassified) fails on a key that is neither
// here nor in its own list of trajectory keys, so a new key is classified when it is added;
// taking a key out of the trajectory is one line here.
//
// A line with usedIf is a key that is part of the trajectory only when usedIf(config) is true;
// otherwise its value in Trajectory is NotUsed, and changing it changes nothing.
var notTrajectory = []struct {
	key    string
	why    string
	usedIf func(*Config) bool
}{
	{key: "data.path", why: "where this host keeps the data set"},
	{key: "data.workers", why: "goroutines assembling the batches, which are the same"},
	{key: "data.prefetch", why: "batches assembled ahead, which are the same"},
	{key: "data.upload_ahead", why: "when the same batch is uploaded, not what it holds"},
	{key: "checkpoint.dir", why: "where checkpoints go"},
	{key: "checkpoint.every", why: "how often checkpoints are written"},
	{key: "checkpoint.keep", why: "how many checkpoints are kept"},
	{key: "checkpoint.per_host", why: "which ranks write checkpoints"},
	{key: "ddp.check_every", why: "how often the replicas are compared"},
	{key: "ddp.channels", why: "bit-identical results for any number of channels"},
	{key: "ddp.shard_optimizer", why: "bit-identical results sharded or not (ddp's shard_test.go); a checkpoint's shard files re-shard to any world size, or to none"},
	{key: "ddp.shard_master", why: "where the f32 master of the other ranks' shards lives, not its values (ddp's TestShard_bitIdenticalToUnsharded)"},
	{key: "ddp.overlap_gather", why: "when the same gathered weights arrive, not their values (ddp's TestShard_bitIdenticalToUnsharded)"},
	{key: "ddp.shard_gather", why: "how the same gathered weights travel, not their values (ddp's TestShardStaged_peerGatherBitIdentical)"},
	{key: "ddp.shard_reduce", why: "where the same ring-ordered sum of the gradients is computed, not its bits (allreduce's TestSumF16_isTheRingsReduceScatterF16, ddp's TestShardStaged_peerReduceBitIdentical)"},
	{key: "ddp.timeout", why: "a bound on waiting, not part of the arithmetic"},
	{key: "ddp.intra_host", why: "how the same average is reduced inside a host (device rounds a 16-bit wire once, the host ring per hop: within the wire's unit; copies is the host ring's bits, ddp's TestPeerCopies_bitIdenticalToHostRing), not what is trained"},
	{key: "train.log_every", why: "how often progress and metrics lines are written"},
	{key: "train.eval_every", why: "how often the run evaluates (evaluation changes no weight)"},
	{key: "train.eval_batches", why: "how much of the eval split an evaluation reads"},
	{key: "train.memory_budget", why: "a cap on device memory (with micro_batch: auto the trajectory has micro_batch auto, not the size found)"},
	{key: "model.checkpoint", why: "activation checkpointing recomputes the same activations (bit-identical on the CPU: model's TestCheckpoint_sameGradsLessMemory)"},
	{key: "model.layout", why: "the activations' order in memory: the same network and parameters (on the CPU bit-identical: model's TestResNet_channelsLastIsTheSameNetwork)"},
	{key: "model.checkpoint_keep_attention", why: "keeps a recomputation's input instead of recomputing it: the same numbers"},
	{key: "model.flash_forward_rows", why: "how many query rows a block of the attention kernel owns: every row adds the same tiles in the same order, the same bits"},
	{key: "metrics.listen", why: "where Prometheus metrics are served"},
	{key: "model.init_from", why: "the weights of step 0, read once by rank 0 (a path, like data.path); a resume's checkpoint supersedes them, and state.json records init_from and the sha256 of the weights it gave"},
	{key: "checkpoint.fresh_if_broken", why: "what to do when every checkpoint is broken: start over (setting them aside) instead of failing"},

	{key: "train.grad_accum_steps", why: "follows from global_batch and the world size when global_batch is set (an elastic restart changes the world size)",
		usedIf: func(c *Config) bool { return c.Train.GlobalBatch == 0 }},
	{key: "train.epochs", why: "the run's length: the learning rate of every step depends on it under the cosine schedule only", usedIf: cosine},
	{key: "train.max_steps", why: "the run's length: the learning rate of every step depends on it under the cosine schedule only", usedIf: cosine},
	{key: "train.warmup_steps", why: "read by the cosine schedule only", usedIf: cosine},
	{key: "train.min_lr", why: "read by the cosine schedule only", usedIf: cosine},
}

func cosine(c *Config) bool { return c.Train.Schedule == ScheduleCosine }

// NotUsed is the value in Trajectory of a conditional key (notTrajectory's usedIf) its condition
// leaves out. It is YAML's null, which no key's value is written as.
const NotUsed = "~"

// TrajectoryFormat names the way Trajectory writes values and Hash hashes them: bump it on any
// change (the hash of every config changes with it; hash_test.go pins a few).
const TrajectoryFormat = "goddp trajectory 1"

// Trajectory returns the canonical trajectory config: every key the trajectory depends on (every
// key of the schema but notTrajectory's), with its value as YAML writes it (0.003, fp16, true,
// [784, 32, 10]; numbers to 15 significant digits; train.micro_batch "auto" or a number;
// model.attention "" as auto; ddp.wire resolved, auto as f16, bf16 or f32). Call it on
// a config whose batch is resolved (TrainConfig.WithBatch) to describe a run: global_batch then
// carries the world size.
func (c *Config) Trajectory() map[string]string {
	out := map[string]string{}
	root := reflect.ValueOf(c).Elem()
	for _, key := range Keys() {
		excluded, used := false, true
		for _, e := range notTrajectory {
			if e.key == key {
				excluded = true
				used = e.usedIf != nil && e.usedIf(c)
			}
		}
		if addedOmitZero[key] && c.valueText(root, key) == c.zeroText(key) {
			continue // unset: the hash of every config from before the key is as it was
		}
		if excluded && !used {
			if isConditional(key) {
				out[key] = NotUsed
			}
			continue
		}
		out[key] = c.valueText(root, key)
	}
	return out
}

// addedOmitZero are trajectory keys added after TrajectoryFormat 1 that are left out of
// Trajectory while they hold their zero value (as YAML's omitempty leaves them out of a config), so
// the hash of every config that does not set them is as it was; set, they are ordinary trajectory
// keys. DiffTrajectory compares a key one side lacks with the default (the zero value), the same.
var addedOmitZero = map[string]bool{"data.image_size": true, "data.mean": true, "data.std": true, "data.synthetic_pool": true, "ddp.hierarchical": true,
	"model.gemm_epilogue": true}

// zeroText is key's value text in a zero Config.
func (c *Config) zeroText(key string) string {
	var z Config
	return z.valueText(reflect.ValueOf(&z).Elem(), key)
}

func isConditional(key string) bool {
	for _, e := range notTrajectory {
		if e.key == key {
			return e.usedIf != nil
		}
	}
	return false
}

// valueText is key's value as YAML writes it (a list in flow style), in canonical spelling.
func (c *Config) valueText(root reflect.Value, key string) string {
	switch key {
	case "train.micro_batch":
		if c.Train.MicroBatchAuto {
			return "auto"
		}
		return strconv.Itoa(c.Train.MicroBatch)
	case "model.attention":
		if c.Model.Attention == "" {
			return string(AttnAuto)
		}
	case "ddp.wire":
		return string(c.WireFormat()) // auto is f16 under fp16, bf16 under bf16, else f32: the same arithmetic
	}
	f, ok := fieldByKey(root, strings.Split(key, "."))
	if !ok {
		panic("config: trajectory: key " + key + " has no field") // Keys and fieldByKey walk the same tags
	}
	if f.Kind() == reflect.Slice {
		parts := make([]string, f.Len())
		for i := range parts {
			parts[i] = scalarText(f.Index(i).Interface())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return scalarText(f.Interface())
}

func scalarText(v any) string {
	if f, ok := v.(float64); ok {
		// 15 significant digits: every decimal a config spells round-trips, and a derived value
		// reads as meant (train.min_lr = lr/10 is 0.0003, not 0.00030000000000000003).
		return strconv.FormatFloat(f, 'g', 15, 64)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		panic("config: trajectory: " + err.Error()) // plain values always encode
	}
	return strings.TrimSpace(string(b))
}

// Hash is the sha256 (hex) of the trajectory config (TrajectoryHash of Trajectory).
func (c *Config) Hash() string { return TrajectoryHash(c.Trajectory()) }

// TrajectoryHash is the sha256 (hex) of a trajectory config: TrajectoryFormat, then one
// "key=value" line per key, sorted.
func TrajectoryHash(t map[string]string) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	h.Write([]byte(TrajectoryFormat + "\n"))
	for _, k := range keys {
		h.Write([]byte(k + "=" + t[k] + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// KeyDiff is a trajectory key whose value differs between two trajectory configs.
type KeyDiff struct {
	Key      string
	Old, New string // as in Trajectory; NotUsed for a conditional key its condition leaves out
}

// DiffTrajectory lists the keys of cur whose values differ in old, in Keys order. old may come
// from another build: a key old lacks (added to the schema since) is compared with this build's
// default for it, which keeps the behaviour of the builds before the key; a key only old has is
// one this build does not count as trajectory (a key taken out of it, or removed) and is ignored.
func DiffTrajectory(old, cur map[string]string) []KeyDiff {
	def := Default().Resolved().Trajectory()
	var out []KeyDiff
	for _, k := range Keys() {
		v, ok := cur[k]
		if !ok {
			continue
		}
		was, ok := old[k]
		if !ok {
			was = def[k]
		}
		if was != v {
			out = append(out, KeyDiff{Key: k, Old: was, New: v})
		}
	}
	return out
}

// ---- the hash of earlier builds ----

// HashV1 is the config hash of the builds before the trajectory config (up to and including
// c094bc3): a sha256 of the whole config's YAML without data.path, data.workers, data.prefetch,
// checkpoint.dir, checkpoint.per_host, ddp.channels, ddp.timeout, train.log_every and
// train.memory_budget (and grad_accum_steps when global_batch is set). A checkpoint they wrote
// carries only it; worker/checkpoint/state.go accepts one when this config's HashV1 matches. It is frozen:
// keys added since are cleared before it is computed (they are omitempty, so an unset one writes
// nothing), and hash_test.go pins it.
func (c *Config) HashV1() string {
	cc := c.Clone()
	cc.Metrics = MetricsConfig{} // added after v1
	cc.Data.Path, cc.Data.Workers, cc.Data.Prefetch = "", 0, 0
	cc.Checkpoint.Dir, cc.Checkpoint.PerHost, cc.Checkpoint.FreshIfBroken = "", false, false
	cc.Model.InitFrom = ""
	cc.Data.ImageSize, cc.Data.Mean, cc.Data.Std, cc.Data.UploadAhead = 0, nil, nil, "" // added after v1
	cc.DDP.Channels = 0
	cc.DDP.Timeout = Duration{}
	cc.DDP.ShardOptimizer = false
	cc.DDP.IntraHost, cc.DDP.Hierarchical, cc.DDP.OverlapGather, cc.DDP.ShardMaster, cc.DDP.ShardGather = "", false, "", "", "" // added after v1
	cc.DDP.ShardReduce = ""                                                                                                     // added after v1
	if cc.Train.GlobalBatch > 0 {
		cc.Train.GradAccumSteps = 0
	}
	cc.Train.LogEvery = 0
	cc.Train.MemoryBudget = ByteSize{}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(cc); err != nil {
		panic("config: hash: " + err.Error()) // plain structs always encode
	}
	enc.Close()
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

// NotTrajectoryKeys lists the keys notTrajectory leaves out of the trajectory always, and, apart,
// those it leaves out under a condition (docs, --keys, tests).
func NotTrajectoryKeys() (always, conditional []string) {
	for _, e := range notTrajectory {
		if e.usedIf == nil {
			always = append(always, e.key)
		} else {
			conditional = append(conditional, e.key)
		}
	}
	slices.Sort(always)
	slices.Sort(conditional)
	return always, conditional
}
