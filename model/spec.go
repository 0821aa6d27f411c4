package model

// spec.go: a model's architecture written down in full, so that a checkpoint opens without the run
// configuration that trained it. A Spec goes into every checkpoint twice: flattened into
// model.safetensors' __metadata__ ("model.kind": "gpt", "model.layers": "12", ...) and as
// config.json beside it. It names everything the forward computes, also what goddp has no knob
// for (GELU's tanh form, LayerNorm's ε, pre-LN blocks, learned positions, biases, the MLP ratio,
// the weights' layout), so a reader needs no knowledge of goddp's defaults.

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
	specMetaPrefix   = "model."       // __metadata__ keys of a Spec
	specGELU         = "gelu"         // Activation of the GPT
	specNormInputs   = "none"         // InputNormalization of the GPT: token ids
	specDType        = "f32"          // DType: checkpoints hold the f32 master weights
	specNames        = "goddp"        // Names: goddp's parameter names (params registered by NewGPT/NewMLP)
	specMLPMetaRatio = 4              // the GPT's MLP hidden width is 4·C
	specFinalNorm    = "layer_norm"   // FinalNorm of the GPT
	specAttnScale    = "1/sqrt(head)" // AttentionScale of the GPT
)

// Spec is a model's architecture, complete: what a reader of its weights needs to run them.
// JSON field names are config.json's.
type Spec struct {
	Format string `json:"format"` // SpecFormat
	Kind   string `json:"kind"`   // "gpt" or "mlp"
	DType  string `json:"dtype"`  // of the stored weights: "f32"
	Names  string `json:"names"`  // the parameter names: "goddp" (see NewGPT, NewMLP)

	// GPT
	Layers  int `json:"layers,omitempty"`  // transformer blocks L
	Width   int `json:"width,omitempty"`   // residual width C
	Heads   int `json:"heads,omitempty"`   // attention heads H (head size C/H)
	Context int `json:"context,omitempty"` // positions in wpe, the longest sequence
	Vocab   int `json:"vocab,omitempty"`   // rows of wte (and lm_head): the logits' width V
	// VocabUsed is the tokenizer's vocabulary when Vocab pads it (GPT-2: 50257 ids in a 50304-row
	// table, a multiple of 64 for fast matmuls); rows from VocabUsed on are padding, never a
	// target. 0 means Vocab.
	VocabUsed      int     `json:"vocab_used,omitempty"`
	Tied           bool    `json:"tied,omitempty"`            // lm_head is wte (logits = x·wteᵀ)
	Norm           string  `json:"norm,omitempty"`            // SpecPreLN
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

	// Both
	Activation   string `json:"activation"`            // "gelu" or "relu"
	GELUApprox   string `json:"gelu_approx,omitempty"` // SpecGELUTanh when Activation is gelu
	LinearLayout string `json:"linear_layout"`         // SpecLinearLayout
	// InputNormalization is what the inputs are before the first layer: "none" for token ids, or
	// the formula the data loader applies (MNIST: "(x/255 - 0.1307)/0.3081"). Set by the caller
	// that knows the data (worker); "" when unknown.
	InputNormalization string `json:"input_normalization,omitempty"`
}

// Spec is the architecture of a GPT of this configuration.
func (c GPTConfig) Spec() Spec {
	return Spec{
		Format: SpecFormat, Kind: SpecKindGPT, DType: specDType, Names: specNames,
		Layers: c.Layers, Width: c.Width, Heads: c.Heads, Context: c.Context, Vocab: c.Vocab, Tied: c.Tied,
		Norm: SpecPreLN, FinalNorm: specFinalNorm, LayerNormEps: LayerNormEps, Positions: SpecLearnedPos,
		MLPRatio: specMLPMetaRatio, Bias: true, AttentionScale: specAttnScale, Dropout: float64(c.Dropout),
		Activation: specGELU, GELUApprox: SpecGELUTanh, LinearLayout: SpecLinearLayout,
		InputNormalization: specNormInputs,
	}
}

// Spec is the architecture of an MLP of this configuration.
func (c MLPConfig) Spec() Spec {
	act := c.Activation
	if act == "" {
		act = ReLU.String()
	}
	s := Spec{
		Format: SpecFormat, Kind: SpecKindMLP, DType: specDType, Names: specNames,
		Widths: append([]int(nil), c.Widths...), Activation: act, LinearLayout: SpecLinearLayout,
		Bias: true, Dropout: float64(c.Dropout),
	}
	if act == specGELU {
		s.GELUApprox = SpecGELUTanh
	}
	return s
}

// GPTConfig is the GPTConfig of a GPT spec, for a model in f32 (set Compute and the memory
// options after). A spec whose architecture goddp does not implement (another GELU, ε, norm
// placement, positions, layout) is an error naming the field.
func (s Spec) GPTConfig() (GPTConfig, error) {
	if s.Kind != SpecKindGPT {
		return GPTConfig{}, fmt.Errorf("model: spec of a %q model, not a gpt", s.Kind)
	}
	if err := s.check(); err != nil {
		return GPTConfig{}, err
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
	return GPTConfig{Layers: s.Layers, Width: s.Width, Heads: s.Heads, Context: s.Context, Vocab: s.Vocab,
		Tied: s.Tied, Dropout: float32(s.Dropout), Compute: tensor.F32}, nil
}

// MLPConfig is the MLPConfig of an MLP spec, in f32.
func (s Spec) MLPConfig() (MLPConfig, error) {
	if s.Kind != SpecKindMLP {
		return MLPConfig{}, fmt.Errorf("model: spec of a %q model, not an mlp", s.Kind)
	}
	if err := s.check(); err != nil {
		return MLPConfig{}, err
	}
	if _, err := ParseActivation(s.Activation); err != nil {
		return MLPConfig{}, err
	}
	return MLPConfig{Widths: append([]int(nil), s.Widths...), Activation: s.Activation, Dropout: float32(s.Dropout)}, nil
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
	return nil
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
