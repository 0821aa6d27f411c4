package model

// hf.go: goddp's GPT in Hugging Face GPT2LMHeadModel's layout and back, so that an export loads
// with transformers' from_pretrained and GPT-2's own weights start a goddp run (worker's
// model.init_from).
//
//	goddp (NewGPT)            shape        HF GPT2LMHeadModel                      shape
//	wte                       (V,C)        transformer.wte.weight                  (V_hf,C)  rows ≥ VocabUsed dropped
//	wpe                       (T,C)        transformer.wpe.weight                  (n_positions,C)
//	h.l.ln1.w / .b            (C)          transformer.h.l.ln_1.weight / .bias     (C)
//	h.l.attn.qkv.w / .b       (3C,C) (3C)  transformer.h.l.attn.c_attn.weight/.bias (C,3C) (3C)
//	h.l.attn.proj.w / .b      (C,C) (C)    transformer.h.l.attn.c_proj.weight/.bias (C,C) (C)
//	h.l.ln2.w / .b            (C)          transformer.h.l.ln_2.weight / .bias     (C)
//	h.l.mlp.fc.w / .b         (4C,C) (4C)  transformer.h.l.mlp.c_fc.weight / .bias  (C,4C) (4C)
//	h.l.mlp.proj.w / .b       (C,4C) (C)   transformer.h.l.mlp.c_proj.weight/.bias  (4C,C) (C)
//	lnf.w / .b                (C)          transformer.ln_f.weight / .bias         (C)
//	lm_head.w (untied only)   (V,C)        lm_head.weight (a Linear, not a Conv1D) (V_hf,C)
//
// HF's Conv1D stores its weight (in, out) and computes x·W + b; goddp's Linear stores (out, in)
// and computes x·Wᵀ + b, so every Conv1D matrix is the transpose. The fused qkv matrix has the
// same column order in both: q, k, v, each head's hs columns side by side (layer_attention.go's
// SplitQKV). GPT-2's GELU is the tanh form ("gelu_new"), as goddp's; LayerNorm ε is 1e-5 in both.
// A tied model has no lm_head.weight: transformers ties it to wte on load.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/goddp/goddp/model/tensor"
)

// hfName maps one goddp parameter name to its HF name and whether the matrix is a Conv1D one
// (stored transposed).
func hfName(name string) (hf string, conv bool, err error) {
	switch name {
	case "wte", "wpe":
		return "transformer." + name + ".weight", false, nil
	case "lnf.w":
		return "transformer.ln_f.weight", false, nil
	case "lnf.b":
		return "transformer.ln_f.bias", false, nil
	case "lm_head.w":
		return "lm_head.weight", false, nil
	}
	var l int
	var rest string
	if n, _ := fmt.Sscanf(name, "h.%d.", &l); n != 1 || !strings.HasPrefix(name, fmt.Sprintf("h.%d.", l)) {
		return "", false, fmt.Errorf("model: parameter %q has no Hugging Face GPT-2 name", name)
	}
	rest = strings.TrimPrefix(name, fmt.Sprintf("h.%d.", l))
	parts := map[string]struct {
		hf   string
		conv bool
	}{
		"ln1.w": {"ln_1.weight", false}, "ln1.b": {"ln_1.bias", false},
		"ln2.w": {"ln_2.weight", false}, "ln2.b": {"ln_2.bias", false},
		"attn.qkv.w": {"attn.c_attn.weight", true}, "attn.qkv.b": {"attn.c_attn.bias", false},
		"attn.proj.w": {"attn.c_proj.weight", true}, "attn.proj.b": {"attn.c_proj.bias", false},
		"mlp.fc.w": {"mlp.c_fc.weight", true}, "mlp.fc.b": {"mlp.c_fc.bias", false},
		"mlp.proj.w": {"mlp.c_proj.weight", true}, "mlp.proj.b": {"mlp.c_proj.bias", false},
	}
	p, ok := parts[rest]
	if !ok {
		return "", false, fmt.Errorf("model: parameter %q has no Hugging Face GPT-2 name", name)
	}
	return fmt.Sprintf("transformer.h.%d.%s", l, p.hf), p.conv, nil
}

// transpose2 returns the (c,r) transpose of the row-major (r,c) matrix v.
func transpose2(v []float32, r, c int) []float32 {
	out := make([]float32, len(v))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			out[j*r+i] = v[i*c+j]
		}
	}
	return out
}

// ToHFGPT2 converts a GPT's weights under goddp's names (NewGPT's parameters, any float dtype) to
// Hugging Face GPT2LMHeadModel's names and layout, in f32: Conv1D matrices transposed, wte's (and
// an untied lm_head's) rows from spec.VocabUsed on (padding) dropped. Every parameter of spec's
// model must be there, and nothing else.
func ToHFGPT2(spec Spec, ts []NamedTensor) ([]NamedTensor, error) {
	cfg, err := spec.GPTConfig()
	if err != nil {
		return nil, err
	}
	want, err := gptShapes(cfg)
	if err != nil {
		return nil, err
	}
	byName, err := checkNamed(ts, want)
	if err != nil {
		return nil, err
	}
	V, C := spec.VocabTokens(), spec.Width
	out := make([]NamedTensor, 0, len(ts))
	for _, name := range sortedKeys(want) {
		t := byName[name]
		hf, conv, err := hfName(name)
		if err != nil {
			return nil, err
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		shape := append([]int(nil), t.Shape...)
		switch {
		case conv:
			v = transpose2(v, shape[0], shape[1])
			shape[0], shape[1] = shape[1], shape[0]
		case name == "wte" || name == "lm_head.w":
			v, shape = v[:V*C], []int{V, C}
		}
		out = append(out, NamedTensor{Name: hf, DType: tensor.F32, Shape: shape, Data: F32Bytes(v)})
	}
	return out, nil
}

// FromHFGPT2 converts Hugging Face GPT-2 weights (GPT2LMHeadModel's names, or GPT2Model's without
// "transformer."; F32, F16 or BF16) to goddp's names and layout in f32 for spec's model. The HF
// model may be smaller where that is harmless: a vocabulary of fewer rows than spec.Vocab is
// padded with copies of its mean row, and a wpe of more positions than spec.Context is cut to its
// first Context rows (GPT-2's 1024 positions into a shorter context). The mean row, not zeros,
// because goddp's softmax runs over the padded columns too: GPT-2's logits lie far below zero
// (tens of units for most tokens), so zero rows, scoring 0, would take nearly all the
// probability, where the mean row scores each position's average logit, far below the likely
// tokens. HF's attention-mask buffers (attn.bias, attn.masked_bias) are skipped, and so is
// lm_head.weight when spec is tied (it is wte). Anything else unknown, missing or of the wrong
// shape is an error naming the tensor.
func FromHFGPT2(spec Spec, ts []NamedTensor) ([]NamedTensor, error) {
	cfg, err := spec.GPTConfig()
	if err != nil {
		return nil, err
	}
	want, err := gptShapes(cfg)
	if err != nil {
		return nil, err
	}
	fromHF := map[string]string{} // HF name → goddp name
	conv := map[string]bool{}
	for name := range want {
		hf, c, err := hfName(name)
		if err != nil {
			return nil, err
		}
		fromHF[hf], conv[name] = name, c
	}
	got := map[string]NamedTensor{}
	var lmHead *NamedTensor // an lm_head.weight going into a tied model
	for _, t := range ts {
		n := t.Name
		if !strings.HasPrefix(n, "transformer.") && n != "lm_head.weight" {
			n = "transformer." + n // GPT2Model's names
		}
		if strings.HasSuffix(n, ".attn.bias") || strings.HasSuffix(n, ".attn.masked_bias") {
			continue // the causal mask, a buffer
		}
		if n == "lm_head.weight" && cfg.Tied {
			lmHead = &t // tied to wte: checked equal below
			continue
		}
		name, ok := fromHF[n]
		if !ok {
			return nil, fmt.Errorf("model: Hugging Face tensor %q is not part of a GPT-2 of %d layers (untied lm_head: %v)", t.Name, cfg.Layers, !cfg.Tied)
		}
		if _, dup := got[name]; dup {
			return nil, fmt.Errorf("model: Hugging Face tensor %q appears twice (with and without \"transformer.\")", t.Name)
		}
		got[name] = t
	}
	if lmHead != nil {
		wte, ok := got["wte"]
		if !ok || fmt.Sprint(wte.Shape) != fmt.Sprint(lmHead.Shape) || !bytes.Equal(wte.Data, lmHead.Data) || wte.DType != lmHead.DType {
			return nil, fmt.Errorf("model: Hugging Face tensor %q differs from %q: an untied lm_head cannot go into a tied model (model.tied true)", lmHead.Name, wte.Name)
		}
	}
	C := cfg.Width
	out := make([]NamedTensor, 0, len(want))
	for _, name := range sortedKeys(want) {
		shape := want[name]
		t, ok := got[name]
		if !ok {
			hf, _, _ := hfName(name)
			return nil, fmt.Errorf("model: Hugging Face weights have no %q (goddp's %s)", hf, name)
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		hs := t.Shape
		switch {
		case conv[name]:
			if len(hs) != 2 || hs[0] != shape[1] || hs[1] != shape[0] {
				return nil, fmt.Errorf("model: Hugging Face %q has shape %v, want %v (a Conv1D's (in, out))", t.Name, hs, []int{shape[1], shape[0]})
			}
			v = transpose2(v, hs[0], hs[1])
		case (name == "wte" || name == "lm_head.w") && len(hs) == 2 && hs[1] == C && hs[0] <= shape[0]:
			v = padRows(v, hs[0], shape[0], C)
		case name == "wpe" && len(hs) == 2 && hs[1] == C && hs[0] >= shape[0]:
			v = v[:shape[0]*C]
		default:
			if fmt.Sprint(hs) != fmt.Sprint(shape) {
				return nil, fmt.Errorf("model: Hugging Face %q has shape %v, the model wants %v", t.Name, hs, shape)
			}
		}
		out = append(out, NamedTensor{Name: name, DType: tensor.F32, Shape: append([]int(nil), shape...), Data: F32Bytes(v)})
	}
	return out, nil
}

// padRows extends the (r,c) matrix v to (rows,c) with copies of its mean row (computed in f64).
func padRows(v []float32, r, rows, c int) []float32 {
	if rows == r || r == 0 {
		return append(v, make([]float32, (rows-r)*c)...)
	}
	mean := make([]float64, c)
	for i := 0; i < r; i++ {
		for j, x := range v[i*c : (i+1)*c] {
			mean[j] += float64(x)
		}
	}
	row := make([]float32, c)
	for j := range row {
		row[j] = float32(mean[j] / float64(r))
	}
	for i := r; i < rows; i++ {
		v = append(v, row...)
	}
	return v
}

// IsHFGPT2 reports whether ts are named as Hugging Face's GPT-2 (not goddp's).
func IsHFGPT2(ts []NamedTensor) bool {
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "transformer.") || t.Name == "wte.weight" || strings.HasSuffix(t.Name, ".ln_1.weight") {
			return true
		}
	}
	return false
}

// HFGPT2Config is the config.json of a Hugging Face GPT2LMHeadModel: the fields an export writes
// and an import checks. (transformers fills the rest with GPT2Config's defaults.)
type HFGPT2Config struct {
	ModelType          string   `json:"model_type"`
	Architectures      []string `json:"architectures"`
	VocabSize          int      `json:"vocab_size"`
	NPositions         int      `json:"n_positions"`
	NCtx               int      `json:"n_ctx"`
	NEmbd              int      `json:"n_embd"`
	NLayer             int      `json:"n_layer"`
	NHead              int      `json:"n_head"`
	NInner             *int     `json:"n_inner"` // null: 4·n_embd
	ActivationFunction string   `json:"activation_function"`
	LayerNormEpsilon   float64  `json:"layer_norm_epsilon"`
	ResidPdrop         float64  `json:"resid_pdrop"`
	EmbdPdrop          float64  `json:"embd_pdrop"`
	AttnPdrop          float64  `json:"attn_pdrop"`
	InitializerRange   float64  `json:"initializer_range"`
	ScaleAttnWeights   bool     `json:"scale_attn_weights"`
	ScaleAttnByLayer   bool     `json:"scale_attn_by_inverse_layer_idx"`
	TieWordEmbeddings  bool     `json:"tie_word_embeddings"`
	BOSTokenID         *int     `json:"bos_token_id,omitempty"`
	EOSTokenID         *int     `json:"eos_token_id,omitempty"`
	TorchDType         string   `json:"torch_dtype"`
}

// gpt2EOT is GPT-2's <|endoftext|>, its bos and eos id.
const gpt2EOT = 50256

// HFGPT2Config is the Hugging Face config.json of an export of this GPT spec (ToHFGPT2): the
// vocabulary without padding, GELU "gelu_new" (the tanh form). GPT-2's <|endoftext|> (50256) is
// named bos and eos when the vocabulary is GPT-2's 50257.
func (s Spec) HFGPT2Config() (HFGPT2Config, error) {
	if _, err := s.GPTConfig(); err != nil {
		return HFGPT2Config{}, err
	}
	c := HFGPT2Config{
		ModelType: "gpt2", Architectures: []string{"GPT2LMHeadModel"},
		VocabSize: s.VocabTokens(), NPositions: s.Context, NCtx: s.Context, NEmbd: s.Width, NLayer: s.Layers, NHead: s.Heads,
		ActivationFunction: "gelu_new", LayerNormEpsilon: s.LayerNormEps,
		ResidPdrop: s.Dropout, EmbdPdrop: s.Dropout, AttnPdrop: s.Dropout, InitializerRange: 0.02,
		ScaleAttnWeights: true, TieWordEmbeddings: s.Tied, TorchDType: "float32",
	}
	if c.VocabSize == gpt2EOT+1 {
		eot := gpt2EOT
		c.BOSTokenID, c.EOSTokenID = &eot, &eot
	}
	return c, nil
}

// JSON is the config as config.json.
func (c HFGPT2Config) JSON() []byte {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		panic("model: HF config JSON: " + err.Error())
	}
	return append(b, '\n')
}

// ParseHFGPT2Config reads a Hugging Face config.json, filling what it leaves out with
// transformers' GPT2Config defaults (GPT-2 small's).
func ParseHFGPT2Config(b []byte) (HFGPT2Config, error) {
	c := HFGPT2Config{VocabSize: 50257, NPositions: 1024, NEmbd: 768, NLayer: 12, NHead: 12,
		ActivationFunction: "gelu_new", LayerNormEpsilon: 1e-5, ScaleAttnWeights: true, TieWordEmbeddings: true}
	if err := json.Unmarshal(b, &c); err != nil {
		return HFGPT2Config{}, fmt.Errorf("model: Hugging Face config.json: %w", err)
	}
	if c.ModelType != "gpt2" {
		return HFGPT2Config{}, fmt.Errorf("model: Hugging Face config.json: model_type %q, want gpt2", c.ModelType)
	}
	return c, nil
}

// Spec is the goddp spec of this GPT-2 (an f32 GPT with goddp's names), or an error when goddp
// does not compute what it describes: another activation than GELU's tanh form, no attention
// scaling or scaling by layer, an inner width other than 4·n_embd.
func (c HFGPT2Config) Spec() (Spec, error) {
	switch c.ActivationFunction {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
	default:
		return Spec{}, fmt.Errorf("model: Hugging Face config.json: activation_function %q: goddp's GELU is the tanh form (gelu_new)", c.ActivationFunction)
	}
	if c.NInner != nil && *c.NInner != 4*c.NEmbd {
		return Spec{}, fmt.Errorf("model: Hugging Face config.json: n_inner %d: goddp's MLP is 4·n_embd = %d wide", *c.NInner, 4*c.NEmbd)
	}
	if !c.ScaleAttnWeights || c.ScaleAttnByLayer {
		return Spec{}, fmt.Errorf("model: Hugging Face config.json: scale_attn_weights %v, scale_attn_by_inverse_layer_idx %v: goddp scales attention by 1/sqrt(head) only", c.ScaleAttnWeights, c.ScaleAttnByLayer)
	}
	if math.Abs(c.LayerNormEpsilon-LayerNormEps) > 1e-12 {
		return Spec{}, fmt.Errorf("model: Hugging Face config.json: layer_norm_epsilon %g: goddp's LayerNorm uses %g", c.LayerNormEpsilon, LayerNormEps)
	}
	s := GPTConfig{Layers: c.NLayer, Width: c.NEmbd, Heads: c.NHead, Context: c.NPositions, Vocab: c.VocabSize,
		Tied: c.TieWordEmbeddings, Dropout: float32(c.ResidPdrop)}.Spec()
	return s, nil
}

// CheckFits reports whether weights of this GPT-2 load into spec's model (FromHFGPT2): the same
// layers, width and heads, no more vocabulary rows than spec.Vocab, at least spec.Context
// positions, tied alike, and an architecture goddp computes. Errors name the field.
func (c HFGPT2Config) CheckFits(spec Spec) error {
	if _, err := c.Spec(); err != nil {
		return err
	}
	var errs []string
	if c.NLayer != spec.Layers {
		errs = append(errs, fmt.Sprintf("n_layer %d, model.layers %d", c.NLayer, spec.Layers))
	}
	if c.NEmbd != spec.Width {
		errs = append(errs, fmt.Sprintf("n_embd %d, model.width %d", c.NEmbd, spec.Width))
	}
	if c.NHead != spec.Heads {
		errs = append(errs, fmt.Sprintf("n_head %d, model.heads %d", c.NHead, spec.Heads))
	}
	if c.VocabSize > spec.Vocab {
		errs = append(errs, fmt.Sprintf("vocab_size %d > model.vocab %d", c.VocabSize, spec.Vocab))
	}
	if c.NPositions < spec.Context {
		errs = append(errs, fmt.Sprintf("n_positions %d < model.context %d", c.NPositions, spec.Context))
	}
	if c.TieWordEmbeddings != spec.Tied {
		errs = append(errs, fmt.Sprintf("tie_word_embeddings %v, model.tied %v", c.TieWordEmbeddings, spec.Tied))
	}
	if len(errs) > 0 {
		return fmt.Errorf("model: Hugging Face GPT-2 does not fit the model: %s", strings.Join(errs, "; "))
	}
	return nil
}
