package model

// spec.go: the one description of a model, of every kind goddp builds (GPT, MLP, ResNet), from
// which the one factory, New (weights.go), builds it. A Spec has two parts:
//
//   - the architecture, written down in full so that a checkpoint opens without the run
//     configuration that trained it. It goes into every checkpoint twice: flattened into
//     model.safetensors' __metadata__ ("model.kind": "gpt", "model.layers": "12", ...) and as
//     config.json beside it. It names everything the forward computes, also what goddp has no
//     knob for (GELU's tanh form, LayerNorm's and BatchNorm's ε, pre-LN blocks, learned
//     positions, biases, the MLP ratio, the weights' layout), so a reader needs no knowledge of
//     goddp's defaults;
//   - how this process runs it (Compute, Checkpoint, Attention, CheckpointKeepAttn, LossChunk),
//     which is not written anywhere (json:"-"): a checkpoint holds the f32 master weights
//     whatever dtype the run computed in, and recomputing blocks gives the same function and
//     gradients to the bit, so a reader of the weights chooses its own. The zero values are f32,
//     no recompute, automatic attention.
//
// What a trainer needs of a model without switching on its kind (one sample's Input, the
// TargetsPerSample, whether it is a Classifier) is a method of the Spec and of every Model.

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/goddp/goddp/model/tensor"
)

// The values of the Spec fields goddp's GPT and MLP implement, one each.
const (
	SpecFormat       = "goddp"        // Spec.Format
	SpecGELUTanh     = "tanh"         // Spec.GELUApprox: 0.5x(1+tanh(√(2/π)(x+0.044715x³))), HF's gelu_new
	SpecPreLN        = "pre_ln"       // Spec.Norm: x + f(LN(x)) in every block, and a final LN
	SpecLearnedPos   = "learned"      // Spec.Positions: a (Context,C) table added to the embeddings
	SpecLinearLayout = "out_in"       // Spec.LinearLayout: Linear W is (Out,In), y = x·Wᵀ + b
	SpecKindGPT      = "gpt"          // Spec.Kind
	SpecKindMLP      = "mlp"          // Spec.Kind
	SpecKindResNet   = "resnet"       // Spec.Kind
	SpecBatchNorm    = "batch_norm"   // Spec.Norm of the ResNet: conv → BN (→ ReLU) in every unit
	SpecConvLayout   = "out_in_kh_kw" // Spec.ConvLayout: a Conv2d's W is (Out,In,KH,KW), PyTorch's
	specMetaPrefix   = "model."       // __metadata__ keys of a Spec
	specGELU         = "gelu"         // Activation of the GPT
	specNormInputs   = "none"         // InputNormalization of the GPT: token ids
	specReLU         = "relu"         // Activation of the ResNet
	specDType        = "f32"          // DType: checkpoints hold the f32 master weights
	specNames        = "goddp"        // Names: goddp's parameter names (params registered by NewGPT/NewMLP)
	specMLPMetaRatio = 4              // the GPT's MLP hidden width is 4·C
	specFinalNorm    = "layer_norm"   // FinalNorm of the GPT
	specAttnScale    = "1/sqrt(head)" // AttentionScale of the GPT
)

// Spec is a model's architecture, complete: what a reader of its weights needs to run them,
// and how this process runs it (the fields tagged json:"-"). JSON field names are config.json's;
// every field added since the first checkpoints is omitempty, so a spec written by an earlier
// build reads back as it was.
type Spec struct {
	Format string `json:"format"` // SpecFormat
	Kind   string `json:"kind"`   // "gpt", "mlp" or "resnet"
	DType  string `json:"dtype"`  // of the stored weights: "f32"
	Names  string `json:"names"`  // the parameter names: "goddp" (see NewGPT, NewMLP, NewResNet)

	// GPT
	Layers int `json:"layers,omitempty"` // transformer blocks L
	// Width is the GPT's residual width C, or the ResNet's first stage's channels (stage s has
	// Width·2^s; 64 in the real ResNets).
	Width   int `json:"width,omitempty"`
	Heads   int `json:"heads,omitempty"`   // attention heads H (head size C/H)
	Context int `json:"context,omitempty"` // positions in wpe, the longest sequence
	Vocab   int `json:"vocab,omitempty"`   // rows of wte (and lm_head): the logits' width V
	// VocabUsed is the tokenizer's vocabulary when Vocab pads it (GPT-2: 50257 ids in a 50304-row
	// table, a multiple of 64 for fast matmuls); rows from VocabUsed on are padding, never a
	// target. 0 means Vocab.
	VocabUsed      int     `json:"vocab_used,omitempty"`
	Tied           bool    `json:"tied,omitempty"`            // lm_head is wte (logits = x·wteᵀ)
	Norm           string  `json:"norm,omitempty"`            // SpecPreLN (GPT), SpecBatchNorm (ResNet)
	FinalNorm      string  `json:"final_norm,omitempty"`      // "layer_norm" before the head
	LayerNormEps   float64 `json:"layer_norm_eps,omitempty"`  // LayerNormEps
	Positions      string  `json:"positions,omitempty"`       // SpecLearnedPos
	MLPRatio       int     `json:"mlp_ratio,omitempty"`       // the MLP's hidden width over C
	Bias           bool    `json:"bias,omitempty"`            // every Linear (qkv, proj, fc) has a bias
	AttentionScale string  `json:"attention_scale,omitempty"` // "1/sqrt(head)"
	// Dropout is the training dropout (embeddings, attention, residuals); inference runs without.
	Dropout float64 `json:"dropout,omitempty"`

	// MLP
	Widths []int `json:"widths,omitempty"` // every width, input to classes

	// ResNet (also Width, Norm, Bias: the head's)
	Depth   int    `json:"depth,omitempty"`   // 18, 34 (basic blocks) or 50 (bottleneck blocks)
	Stem    string `json:"stem,omitempty"`    // "imagenet" (7×7/2 conv, 3×3/2 max pool) or "small" (3×3/1 conv)
	Classes int    `json:"classes,omitempty"` // the head's outputs K
	// Image is one input image (C,H,W), e.g. [1,28,28]: Inputs.X is (B, C·H·W) f32, read NCHW.
	Image             []int   `json:"image,omitempty"`
	BatchNormEps      float64 `json:"batch_norm_eps,omitempty"`      // BatchNormEps
	BatchNormMomentum float64 `json:"batch_norm_momentum,omitempty"` // of the running statistics: BatchNormMomentum
	ConvLayout        string  `json:"conv_layout,omitempty"`         // SpecConvLayout

	// All
	Activation   string `json:"activation"`            // "gelu" or "relu"
	GELUApprox   string `json:"gelu_approx,omitempty"` // SpecGELUTanh when Activation is gelu
	LinearLayout string `json:"linear_layout"`         // SpecLinearLayout
	// InputNormalization is what the inputs are before the first layer: "none" for token ids, or
	// the formula the data loader applies (MNIST: "(x/255 - 0.1307)/0.3081"). Set by the caller
	// that knows the data (worker); "" when unknown.
	InputNormalization string `json:"input_normalization,omitempty"`

	// How this process runs the model (spec.go's header says why none of it is written down).

	// Compute is the dtype the model computes in: F32, or F16 for mixed precision (an f16 copy of
	// the weights, f16 activations; parameter gradients, norms' statistics and the loss stay
	// f32). Not DType, which is the stored weights'.
	Compute tensor.DType `json:"-"`
	// Checkpoint recomputes blocks (GPT, ResNet) or hidden stages (MLP) in backward instead of
	// keeping their activations: 0 none, 1 every one, N every Nth (0, N, 2N, …).
	Checkpoint int `json:"-"`
	// Attention is the GPT's attention path (GPTConfig.Attention); CheckpointKeepAttn makes its
	// checkpointed blocks keep the fused attention's output (GPTConfig.CheckpointKeepAttn);
	// LossChunk is the rows of logits its head holds at a time (GPTConfig.LossChunk, 0 the default).
	Attention          AttentionMode `json:"-"`
	CheckpointKeepAttn bool          `json:"-"`
	LossChunk          int           `json:"-"`
	// GemmEpilogue is GPTConfig.GemmEpilogue (biases, GELU and bias gradients in the GEMMs).
	GemmEpilogue bool `json:"-"`
	// Layout is the ResNet's activation layout (ResNetConfig.Layout: NCHW, or NHWC for the CUDA
	// device's tensor cores); the weights are stored the same in either.
	Layout tensor.Layout `json:"-"`
}

// Spec is the spec of a GPT of this configuration: its architecture, compute dtype and memory
// options (New builds the same GPT from it).
func (c GPTConfig) Spec() Spec {
	return Spec{
		Format: SpecFormat, Kind: SpecKindGPT, DType: specDType, Names: specNames,
		Layers: c.Layers, Width: c.Width, Heads: c.Heads, Context: c.Context, Vocab: c.Vocab, Tied: c.Tied,
		Norm: SpecPreLN, FinalNorm: specFinalNorm, LayerNormEps: LayerNormEps, Positions: SpecLearnedPos,
		MLPRatio: specMLPMetaRatio, Bias: true, AttentionScale: specAttnScale, Dropout: float64(c.Dropout),
		Activation: specGELU, GELUApprox: SpecGELUTanh, LinearLayout: SpecLinearLayout,
		InputNormalization: specNormInputs,

		Compute: c.Compute, Checkpoint: c.Checkpoint, Attention: c.Attention,
		CheckpointKeepAttn: c.CheckpointKeepAttn, LossChunk: c.LossChunk, GemmEpilogue: c.GemmEpilogue,
	}
}

// Spec is the spec of an MLP of this configuration (New builds the same MLP from it).
func (c MLPConfig) Spec() Spec {
	act := c.Activation
	if act == "" {
		act = ReLU.String()
	}
	s := Spec{
		Format: SpecFormat, Kind: SpecKindMLP, DType: specDType, Names: specNames,
		Widths: append([]int(nil), c.Widths...), Activation: act, LinearLayout: SpecLinearLayout,
		Bias: true, Dropout: float64(c.Dropout), Compute: c.Compute, Checkpoint: c.Checkpoint,
	}
	if act == specGELU {
		s.GELUApprox = SpecGELUTanh
	}
	return s
}

// Spec is the spec of a ResNet of this configuration (New builds the same ResNet from it).
func (c ResNetConfig) Spec() Spec {
	return Spec{
		Format: SpecFormat, Kind: SpecKindResNet, DType: specDType, Names: specNames,
		Depth: c.Depth, Stem: c.Stem, Width: c.Width, Classes: c.Classes, Image: []int{c.InC, c.InH, c.InW},
		Norm: SpecBatchNorm, BatchNormEps: BatchNormEps, BatchNormMomentum: BatchNormMomentum, ConvLayout: SpecConvLayout,
		Bias: true, Activation: specReLU, LinearLayout: SpecLinearLayout,
		Compute: c.Compute, Checkpoint: c.Checkpoint, Layout: c.Layout,
	}
}

// GPTConfig is the GPTConfig of a GPT spec, with the spec's compute dtype and memory options. A
// spec whose architecture goddp does not implement (another GELU, ε, norm placement, positions,
// layout) or whose sizes do not fit is an error naming the field.
func (s Spec) GPTConfig() (GPTConfig, error) {
	if s.Kind != SpecKindGPT {
		return GPTConfig{}, fmt.Errorf("model: spec of a %q model, not a gpt", s.Kind)
	}
	if err := s.check(); err != nil {
		return GPTConfig{}, err
	}
	if err := positiveFields(specInt{"layers", s.Layers}, specInt{"width", s.Width}, specInt{"heads", s.Heads},
		specInt{"context", s.Context}, specInt{"vocab", s.Vocab}); err != nil {
		return GPTConfig{}, err
	}
	if s.Width%s.Heads != 0 {
		return GPTConfig{}, fmt.Errorf("model: spec heads %d: must divide width %d", s.Heads, s.Width)
	}
	for _, f := range []struct{ name, got, want string }{
		{"activation", s.Activation, specGELU},
		{"norm", s.Norm, SpecPreLN},
		{"final_norm", s.FinalNorm, specFinalNorm},
		{"positions", s.Positions, SpecLearnedPos},
		{"attention_scale", s.AttentionScale, specAttnScale},
	} {
		if f.got != f.want {
			return GPTConfig{}, fmt.Errorf("model: spec %s %q: goddp's GPT implements %q", f.name, f.got, f.want)
		}
	}
	if math.Abs(s.LayerNormEps-LayerNormEps) > 1e-12 {
		return GPTConfig{}, fmt.Errorf("model: spec layer_norm_eps %g: goddp's LayerNorm uses %g", s.LayerNormEps, LayerNormEps)
	}
	if s.MLPRatio != specMLPMetaRatio || !s.Bias {
		return GPTConfig{}, fmt.Errorf("model: spec mlp_ratio %d, bias %v: goddp's GPT has mlp_ratio %d with biases", s.MLPRatio, s.Bias, specMLPMetaRatio)
	}
	if s.VocabUsed < 0 || s.VocabUsed > s.Vocab {
		return GPTConfig{}, fmt.Errorf("model: spec vocab_used %d: want 0 < vocab_used <= vocab %d", s.VocabUsed, s.Vocab)
	}
	if s.LossChunk < 0 {
		return GPTConfig{}, fmt.Errorf("model: spec loss_chunk %d: want rows > 0, or 0 for the default", s.LossChunk)
	}
	return GPTConfig{Layers: s.Layers, Width: s.Width, Heads: s.Heads, Context: s.Context, Vocab: s.Vocab,
		Tied: s.Tied, Dropout: float32(s.Dropout), Compute: s.Compute, Checkpoint: s.Checkpoint,
		LossChunk: s.LossChunk, Attention: s.Attention, CheckpointKeepAttn: s.CheckpointKeepAttn,
		GemmEpilogue: s.GemmEpilogue}, nil
}

// MLPConfig is the MLPConfig of an MLP spec, with the spec's compute dtype and checkpointing.
func (s Spec) MLPConfig() (MLPConfig, error) {
	if s.Kind != SpecKindMLP {
		return MLPConfig{}, fmt.Errorf("model: spec of a %q model, not an mlp", s.Kind)
	}
	if err := s.check(); err != nil {
		return MLPConfig{}, err
	}
	if _, err := ParseActivation(s.Activation); err != nil {
		return MLPConfig{}, fmt.Errorf("model: spec activation: %w", err)
	}
	if len(s.Widths) < 2 {
		return MLPConfig{}, fmt.Errorf("model: spec widths %v: want at least the input and output widths", s.Widths)
	}
	for i, w := range s.Widths {
		if w <= 0 {
			return MLPConfig{}, fmt.Errorf("model: spec widths[%d] = %d: must be positive", i, w)
		}
	}
	return MLPConfig{Widths: append([]int(nil), s.Widths...), Activation: s.Activation, Dropout: float32(s.Dropout),
		Compute: s.Compute, Checkpoint: s.Checkpoint}, nil
}

// ResNetConfig is the ResNetConfig of a ResNet spec, with the spec's compute dtype and
// checkpointing. A spec whose architecture goddp does not implement, or of no size, is an error
// naming the field. (Specs written before ResNet's were complete hold only the kind: their
// checkpoints load, but cannot build a model from the spec alone.)
func (s Spec) ResNetConfig() (ResNetConfig, error) {
	if s.Kind != SpecKindResNet {
		return ResNetConfig{}, fmt.Errorf("model: spec of a %q model, not a resnet", s.Kind)
	}
	if _, ok := resnetStages[s.Depth]; !ok {
		return ResNetConfig{}, fmt.Errorf("model: spec depth %d: want 18, 34 or 50", s.Depth)
	}
	if s.Stem != "imagenet" && s.Stem != "small" {
		return ResNetConfig{}, fmt.Errorf("model: spec stem %q: want imagenet or small", s.Stem)
	}
	if err := positiveFields(specInt{"width", s.Width}, specInt{"classes", s.Classes}); err != nil {
		return ResNetConfig{}, err
	}
	if len(s.Image) != 3 || s.Image[0] <= 0 || s.Image[1] <= 0 || s.Image[2] <= 0 {
		return ResNetConfig{}, fmt.Errorf("model: spec image %v: want one image's (C,H,W), all positive", s.Image)
	}
	if err := s.check(); err != nil {
		return ResNetConfig{}, err
	}
	for _, f := range []struct{ name, got, want string }{
		{"activation", s.Activation, specReLU},
		{"norm", s.Norm, SpecBatchNorm},
		{"conv_layout", s.ConvLayout, SpecConvLayout},
	} {
		if f.got != f.want {
			return ResNetConfig{}, fmt.Errorf("model: spec %s %q: goddp's ResNet implements %q", f.name, f.got, f.want)
		}
	}
	if math.Abs(s.BatchNormEps-BatchNormEps) > 1e-12 || math.Abs(s.BatchNormMomentum-BatchNormMomentum) > 1e-12 {
		return ResNetConfig{}, fmt.Errorf("model: spec batch_norm_eps %g, batch_norm_momentum %g: goddp's BatchNorm uses %g, %g",
			s.BatchNormEps, s.BatchNormMomentum, BatchNormEps, BatchNormMomentum)
	}
	if !s.Bias {
		return ResNetConfig{}, fmt.Errorf("model: spec bias false: goddp's ResNet head has a bias")
	}
	if s.Dropout != 0 {
		return ResNetConfig{}, fmt.Errorf("model: spec dropout %g: goddp's ResNet has no dropout", s.Dropout)
	}
	return ResNetConfig{Depth: s.Depth, Stem: s.Stem, Width: s.Width, Classes: s.Classes,
		InC: s.Image[0], InH: s.Image[1], InW: s.Image[2], Compute: s.Compute, Checkpoint: s.Checkpoint,
		Layout: s.Layout}, nil
}

// specInt is a spec field's JSON name and value.
type specInt struct {
	name string
	v    int
}

// positiveFields is an error naming the first field that is not positive.
func positiveFields(fs ...specInt) error {
	for _, f := range fs {
		if f.v <= 0 {
			return fmt.Errorf("model: spec %s %d: must be positive", f.name, f.v)
		}
	}
	return nil
}

// check is what every spec must say the same way as this build.
func (s Spec) check() error {
	if s.Format != SpecFormat {
		return fmt.Errorf("model: spec format %q, want %q", s.Format, SpecFormat)
	}
	if s.LinearLayout != SpecLinearLayout {
		return fmt.Errorf("model: spec linear_layout %q: goddp's Linear weights are %q", s.LinearLayout, SpecLinearLayout)
	}
	if s.Activation == specGELU && s.GELUApprox != SpecGELUTanh {
		return fmt.Errorf("model: spec gelu_approx %q: goddp's GELU is the %q form", s.GELUApprox, SpecGELUTanh)
	}
	if s.Names != specNames {
		return fmt.Errorf("model: spec names %q: want goddp's (%q)", s.Names, specNames)
	}
	if !(s.Dropout >= 0 && s.Dropout < 1) {
		return fmt.Errorf("model: spec dropout %g: want a probability in [0,1)", s.Dropout)
	}
	if s.Compute != tensor.F32 && !s.Compute.Half() {
		return fmt.Errorf("model: spec compute %s: want f32, f16 or bf16", s.Compute)
	}
	if s.Checkpoint < 0 {
		return fmt.Errorf("model: spec checkpoint %d: want 0 (none), 1 (every block) or N (every Nth)", s.Checkpoint)
	}
	return nil
}

// Input is one sample's input to the model spec describes (Model.Input): Context token ids
// for a GPT, Widths[0] floats for an MLP, one Image for a ResNet. The zero Input for a spec of
// no known kind (or no size).
func (s Spec) Input() Input {
	switch s.Kind {
	case SpecKindGPT:
		return Input{Tokens: s.Context}
	case SpecKindMLP:
		if len(s.Widths) > 0 {
			return Input{Shape: []int{s.Widths[0]}}
		}
	case SpecKindResNet:
		if len(s.Image) > 0 {
			return Input{Shape: append([]int(nil), s.Image...)}
		}
	}
	return Input{}
}

// TargetsPerSample is the targets per sample of the model spec describes (Model.TargetsPerSample):
// Context for a GPT, 1 for a classifier.
func (s Spec) TargetsPerSample() int {
	if s.Kind == SpecKindGPT {
		return s.Context
	}
	return 1
}

// Classifier reports whether spec describes a classifier (Model.Classifier): an MLP or a ResNet.
func (s Spec) Classifier() bool { return s.Kind == SpecKindMLP || s.Kind == SpecKindResNet }

// Summary is the model in one line, for logs and plot titles: "gpt layers 12 width 768 heads 12
// context 1024 vocab 50257 padded to 50304", "mlp 784-512-10 relu", "resnet depth 18 stem
// \"small\" width 64 classes 10".
func (s Spec) Summary() string {
	switch s.Kind {
	case SpecKindGPT:
		v := fmt.Sprint(s.Vocab)
		if u := s.VocabUsed; u > 0 && u != s.Vocab {
			v = fmt.Sprintf("%d padded to %d", u, s.Vocab)
		}
		return fmt.Sprintf("gpt layers %d width %d heads %d context %d vocab %s", s.Layers, s.Width, s.Heads, s.Context, v)
	case SpecKindMLP:
		w := make([]string, len(s.Widths))
		for i, x := range s.Widths {
			w[i] = fmt.Sprint(x)
		}
		return "mlp " + strings.Join(w, "-") + " " + s.Activation
	case SpecKindResNet:
		r := fmt.Sprintf("resnet depth %d stem %q width %d classes %d", s.Depth, s.Stem, s.Width, s.Classes)
		if s.Layout == tensor.NHWC {
			r += " layout nhwc" // NCHW, the default, goes unsaid
		}
		return r
	}
	return s.Kind
}

// VocabTokens is the tokenizer's vocabulary: VocabUsed, or Vocab when it pads nothing.
func (s Spec) VocabTokens() int {
	if s.VocabUsed > 0 {
		return s.VocabUsed
	}
	return s.Vocab
}

// JSON is the spec as config.json: indented, a newline at the end.
func (s Spec) JSON() []byte {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic("model: spec JSON: " + err.Error()) // a plain struct always encodes
	}
	return append(b, '\n')
}

// ParseSpec reads config.json (Spec.JSON). Unknown fields are refused: a field this build does
// not know may change what the weights mean.
func ParseSpec(b []byte) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("model: spec config.json: %w", err)
	}
	if s.Format != SpecFormat {
		return Spec{}, fmt.Errorf("model: spec config.json: format %q, want %q", s.Format, SpecFormat)
	}
	return s, nil
}

// Metadata flattens the spec into safetensors __metadata__ entries, "model.<field>": its JSON
// value ("model.layers": "12", "model.kind": "gpt", "model.widths": "[784,10]").
func (s Spec) Metadata() map[string]string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(s.JSON(), &fields); err != nil {
		panic("model: spec metadata: " + err.Error())
	}
	meta := make(map[string]string, len(fields))
	for k, v := range fields {
		var str string
		if json.Unmarshal(v, &str) == nil {
			meta[specMetaPrefix+k] = str // strings bare: "gpt", not "\"gpt\""
		} else {
			meta[specMetaPrefix+k] = string(v)
		}
	}
	return meta
}

// specStringFields are the JSON names of Spec's string fields, which Metadata writes bare.
var specStringFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Spec]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() == reflect.String {
			m[strings.Split(f.Tag.Get("json"), ",")[0]] = true
		}
	}
	return m
}()

// SpecFromMetadata reads a spec back from safetensors __metadata__ (Metadata's entries; other
// keys are ignored). ok is false when meta holds no spec.
func SpecFromMetadata(meta map[string]string) (s Spec, ok bool, err error) {
	var keys []string
	for k := range meta {
		if strings.HasPrefix(k, specMetaPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return Spec{}, false, nil
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, v := strings.TrimPrefix(k, specMetaPrefix), meta[k]
		if specStringFields[name] {
			v = strconv.Quote(v) // written bare
		}
		fmt.Fprintf(&b, "%q:%s", name, v)
	}
	b.WriteByte('}')
	s, err = ParseSpec([]byte(b.String()))
	if err != nil {
		return Spec{}, true, fmt.Errorf("model: spec in __metadata__: %w", err)
	}
	return s, true, nil
}
