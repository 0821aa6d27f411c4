package config

// choice.go: the string-valued keys, as typed values. Each is parsed once, when the YAML is
// decoded or a --set applied; a value outside its set is a *ChoiceError naming the key and the
// accepted values. The types are strings underneath, spelled as in the file, so YAML, Hash and
// comparisons with the constants below need no conversion.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Precision is `precision`: the arithmetic of the run.
type Precision string

const (
	FP32 Precision = "fp32" // everything in float32
	FP16 Precision = "fp16" // FP16 matmuls and activations, FP32 master weights, a dynamic loss scaler
	// BF16: bfloat16 matmuls and activations (f32's range in 16 bits), FP32 master weights,
	// no loss scaler: an inf or NaN gradient is an error naming the step.
	BF16 Precision = "bf16"
)

// ModelKind is `model.kind`.
type ModelKind string

const (
	ModelMLP ModelKind = "mlp" // model.widths, model.activation
	ModelGPT ModelKind = "gpt" // model.layers, width, heads, context, vocab
	// ModelResNet is a residual CNN (issue 21): model.depth, stem, width, classes.
	ModelResNet ModelKind = "resnet"
)

// Activation is `model.activation` (MLP).
type Activation string

const (
	ActReLU Activation = "relu"
	ActGELU Activation = "gelu"
)

// Attention is `model.attention` (GPT). "" means auto.
type Attention string

const (
	AttnAuto         Attention = "auto"         // flash where the device has a fast kernel for it
	AttnFlash        Attention = "flash"        // the fused kernel; no attention dropout
	AttnMaterialized Attention = "materialized" // T×T scores by batched GEMMs and a softmax
)

// Schedule is `train.schedule`.
type Schedule string

const (
	ScheduleConstant Schedule = "constant" // lr at every step
	ScheduleCosine   Schedule = "cosine"   // linear warmup, then cosine from lr to min_lr
)

// Optimizer is `train.optimizer`.
type Optimizer string

const (
	OptAdamW Optimizer = "adamw"
	OptSGD   Optimizer = "sgd"
)

// DataKind is `data.kind`.
type DataKind string

const (
	DataMNIST  DataKind = "mnist"  // classification of 28×28 images (a model.kind mlp or resnet)
	DataText   DataKind = "text"   // byte-level language modelling (a model.kind gpt)
	DataTokens DataKind = "tokens" // token shards (llm.c's format) for a model.kind gpt
	// DataSyntheticImages is made-up ImageNet-shaped batches (3×224×224, 1000 classes; a
	// model.kind resnet) for benchmarks: nothing is read from disk.
	DataSyntheticImages DataKind = "synthetic-images"
	// DataImageFolder is a resnet's images in data.path as ROOT/{train,val}/CLASS/*.jpg|png.
	DataImageFolder DataKind = "image_folder"
	// DataSyntheticTokens is made-up token windows, ids uniform over the model's vocabulary (a
	// model.kind gpt), for benchmarks: what PyTorch's GPT-2 benchmark trains on; nothing is read.
	DataSyntheticTokens DataKind = "synthetic-tokens"
)

// Wire is `ddp.wire`: the all-reduce wire format. Config.WireFormat resolves auto.
type Wire string

const (
	WireAuto Wire = "auto" // follows precision: f16 under fp16, bf16 under bf16, else f32
	WireF32  Wire = "f32"
	WireF16  Wire = "f16"
	WireBF16 Wire = "bf16"
)

// ChoiceError is a value outside a key's set.
type ChoiceError struct {
	Key   string   // the YAML key, e.g. "train.optimizer"
	Value string   // what was given
	Want  []string // the accepted values, or a description of them
}

func (e *ChoiceError) Error() string {
	return fmt.Sprintf("%s: %q: want one of %s", e.Key, e.Value, strings.Join(e.Want, ", "))
}

// choices is the set of one key: the accepted values, and other spellings taken for them.
type choices[T ~string] struct {
	key     string
	values  []T
	aliases map[string]T
}

func (c choices[T]) parse(s string) (T, error) {
	for _, v := range c.values {
		if string(v) == s {
			return v, nil
		}
	}
	if v, ok := c.aliases[s]; ok {
		return v, nil
	}
	want := make([]string, len(c.values))
	for i, v := range c.values {
		want[i] = string(v)
	}
	return "", &ChoiceError{Key: c.key, Value: s, Want: want}
}

var (
	precisions  = choices[Precision]{key: "precision", values: []Precision{FP32, FP16, BF16}}
	modelKinds  = choices[ModelKind]{key: "model.kind", values: []ModelKind{ModelMLP, ModelGPT, ModelResNet}}
	activations = choices[Activation]{key: "model.activation", values: []Activation{ActReLU, ActGELU}}
	attentions  = choices[Attention]{key: "model.attention", values: []Attention{AttnAuto, AttnFlash, AttnMaterialized},
		aliases: map[string]Attention{"": "", "materialised": AttnMaterialized}}
	schedules  = choices[Schedule]{key: "train.schedule", values: []Schedule{ScheduleConstant, ScheduleCosine}}
	optimizers = choices[Optimizer]{key: "train.optimizer", values: []Optimizer{OptAdamW, OptSGD}}
	dataKinds  = choices[DataKind]{key: "data.kind", values: []DataKind{DataMNIST, DataText, DataTokens, DataSyntheticImages, DataImageFolder, DataSyntheticTokens}}
	wires      = choices[Wire]{key: "ddp.wire", values: []Wire{WireAuto, WireF32, WireF16, WireBF16}}
)

// ParsePrecision reads `precision`: fp32, fp16 or bf16.
func ParsePrecision(s string) (Precision, error) { return precisions.parse(s) }

// ParseModelKind reads `model.kind`: mlp, gpt or resnet.
func ParseModelKind(s string) (ModelKind, error) { return modelKinds.parse(s) }

// ParseActivation reads `model.activation`: relu or gelu.
func ParseActivation(s string) (Activation, error) { return activations.parse(s) }

// ParseAttention reads `model.attention`: auto (or ""), flash, or materialized ("materialised"
// is taken for it).
func ParseAttention(s string) (Attention, error) { return attentions.parse(s) }

// ParseSchedule reads `train.schedule`: constant or cosine.
func ParseSchedule(s string) (Schedule, error) { return schedules.parse(s) }

// ParseOptimizer reads `train.optimizer`: adamw or sgd.
func ParseOptimizer(s string) (Optimizer, error) { return optimizers.parse(s) }

// ParseDataKind reads `data.kind`: mnist, text, tokens or synthetic-images.
func ParseDataKind(s string) (DataKind, error) { return dataKinds.parse(s) }

// ParseWire reads `ddp.wire`: auto, f32, f16 or bf16.
func ParseWire(s string) (Wire, error) { return wires.parse(s) }

// Checkpointing is `model.checkpoint`, activation checkpointing: none, blocks or every_N.
type Checkpointing struct {
	// Every is the period: 0 = none, 1 = every block (or MLP stage), N = every N-th block.
	Every int
	// text is the value as written ("blocks", "every_1", ...), kept for YAML and Hash; "" for a
	// Checkpointing built in Go, which then writes as its canonical spelling.
	text string
}

// CheckpointNone is model.checkpoint: none, the default.
var CheckpointNone = Checkpointing{Every: 0, text: "none"}

// ParseCheckpointing reads `model.checkpoint`: none (or ""), blocks, or every_N with N ≥ 1.
func ParseCheckpointing(s string) (Checkpointing, error) {
	switch s {
	case "", "none":
		return Checkpointing{Every: 0, text: s}, nil
	case "blocks":
		return Checkpointing{Every: 1, text: s}, nil
	}
	if n, ok := strings.CutPrefix(s, "every_"); ok {
		if n, err := strconv.Atoi(n); err == nil && n >= 1 {
			return Checkpointing{Every: n, text: s}, nil
		}
	}
	return Checkpointing{}, &ChoiceError{Key: "model.checkpoint", Value: s, Want: []string{"none", "blocks", "every_N (N >= 1)"}}
}

// String is the value as written, or the canonical spelling of Every.
func (c Checkpointing) String() string {
	switch {
	case c.text != "" || c.Every == 0:
		return c.text // "" only for the zero value, as a zero Config has always written it
	case c.Every == 1:
		return "blocks"
	}
	return "every_" + strconv.Itoa(c.Every)
}

// ByteSize is a size in bytes written as "16GiB", "512MiB", "1.5GB", "4096" or "" (0); see
// ParseBytes. It is `train.memory_budget`.
type ByteSize struct {
	Bytes int64
	text  string // as written, kept for YAML; "" for a ByteSize built in Go
}

// ParseByteSize reads a size (ParseBytes) and keeps its spelling.
func ParseByteSize(s string) (ByteSize, error) {
	n, err := ParseBytes(s)
	if err != nil {
		return ByteSize{}, err
	}
	return ByteSize{Bytes: n, text: strings.TrimSpace(s)}, nil
}

// String is the size as written, or its byte count ("" for 0).
func (b ByteSize) String() string {
	if b.text != "" || b.Bytes == 0 {
		return b.text
	}
	return strconv.FormatInt(b.Bytes, 10)
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

// ---- decoding: YAML and --set go through setText ----

// textValue is a key whose value is parsed from its text: the choices above, Checkpointing and
// ByteSize. Set and UnmarshalYAML both call setText, so a file and a --set are read alike.
type textValue interface {
	setText(s string) error
}

func (p *Precision) setText(s string) error     { return set(p, s, ParsePrecision) }
func (k *ModelKind) setText(s string) error     { return set(k, s, ParseModelKind) }
func (a *Activation) setText(s string) error    { return set(a, s, ParseActivation) }
func (a *Attention) setText(s string) error     { return set(a, s, ParseAttention) }
func (sc *Schedule) setText(s string) error     { return set(sc, s, ParseSchedule) }
func (o *Optimizer) setText(s string) error     { return set(o, s, ParseOptimizer) }
func (k *DataKind) setText(s string) error      { return set(k, s, ParseDataKind) }
func (w *Wire) setText(s string) error          { return set(w, s, ParseWire) }
func (c *Checkpointing) setText(s string) error { return set(c, s, ParseCheckpointing) }
func (b *ByteSize) setText(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return fmt.Errorf("train.memory_budget: %w", err)
	}
	*b = v
	return nil
}

func set[T any](dst *T, s string, parse func(string) (T, error)) error {
	v, err := parse(s)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// unmarshalText decodes a scalar node into v. A bad value becomes a *yaml.TypeError carrying the
// node's line, so the decoder goes on and reports it with the file's other errors as file:line.
func unmarshalText(n *yaml.Node, v textValue) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	if err := v.setText(s); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

func (p *Precision) UnmarshalYAML(n *yaml.Node) error     { return unmarshalText(n, p) }
func (k *ModelKind) UnmarshalYAML(n *yaml.Node) error     { return unmarshalText(n, k) }
func (a *Activation) UnmarshalYAML(n *yaml.Node) error    { return unmarshalText(n, a) }
func (a *Attention) UnmarshalYAML(n *yaml.Node) error     { return unmarshalText(n, a) }
func (s *Schedule) UnmarshalYAML(n *yaml.Node) error      { return unmarshalText(n, s) }
func (o *Optimizer) UnmarshalYAML(n *yaml.Node) error     { return unmarshalText(n, o) }
func (k *DataKind) UnmarshalYAML(n *yaml.Node) error      { return unmarshalText(n, k) }
func (w *Wire) UnmarshalYAML(n *yaml.Node) error          { return unmarshalText(n, w) }
func (c *Checkpointing) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, c) }
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error      { return unmarshalText(n, b) }

// MarshalYAML writes the value as written.
func (c Checkpointing) MarshalYAML() (any, error) { return c.String(), nil }

// MarshalYAML writes the size as written.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// Duration is a time written as Go writes durations ("30s", "2m", "1h30m") or "" (0). It is
// `ddp.timeout`.
type Duration struct {
	D time.Duration
}

func (d *Duration) setText(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*d = Duration{}
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 30s, 5m)", s)
	}
	if v < 0 {
		return fmt.Errorf("%s: must be positive (or \"\" for the default)", s)
	}
	*d = Duration{D: v}
	return nil
}

func (d *Duration) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, d) }

// MarshalYAML writes the duration ("" for 0).
func (d Duration) MarshalYAML() (any, error) {
	if d.D == 0 {
		return "", nil
	}
	return d.D.String(), nil
}

// IsZero lets omitempty leave an unset duration out of the YAML (and so of the hash).
func (d Duration) IsZero() bool { return d.D == 0 }
