package worker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/checkpoint"
)

// Export writes Hugging Face GPT2LMHeadModel's layout: config.json with gpt2's fields, no
// lm_head (tied), the padded vocabulary rows dropped; the directory opens as an HF GPT-2 and its
// logits are goddp_logits.json's, which are the checkpoint's model's.
func TestExport_hf(t *testing.T) {
	shards := writeTokenShards(t, 64, 2000)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, err := Run(context.Background(), tokensGPT(t, shards, "checkpoint.dir="+ck), Options{Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "hf")
	res, err := checkpoint.Export(ck, checkpoint.ExportOptions{Format: "hf", Out: out, CheckLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 3 || res.Step != 2 {
		t.Errorf("result %+v", res)
	}
	var hc map[string]any
	if err := json.Unmarshal(mustRead(t, filepath.Join(out, "config.json")), &hc); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"model_type": "gpt2", "n_embd": 64.0, "n_layer": 2.0, "n_head": 4.0, "n_positions": 32.0,
		"n_ctx": 32.0, "vocab_size": 64.0, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": true} {
		if hc[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, hc[k], v)
		}
	}
	if a, _ := hc["architectures"].([]any); len(a) != 1 || a[0] != "GPT2LMHeadModel" {
		t.Errorf("architectures %v", hc["architectures"])
	}
	ts, meta, err := model.ParseSafetensors(mustRead(t, filepath.Join(out, "model.safetensors")))
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" {
		t.Errorf("metadata %v: transformers wants format pt", meta)
	}
	names := map[string][]int{}
	for _, x := range ts {
		names[x.Name] = x.Shape
	}
	if _, ok := names["lm_head.weight"]; ok {
		t.Error("a tied export has lm_head.weight")
	}
	if s := names["transformer.wte.weight"]; len(s) != 2 || s[0] != 64 {
		t.Errorf("wte %v: the padding rows are not dropped", s)
	}
	if s := names["transformer.h.1.mlp.c_fc.weight"]; len(s) != 2 || s[0] != 64 || s[1] != 256 {
		t.Errorf("c_fc.weight %v, want (in, out) = (64, 256)", s)
	}

	var ref struct {
		Tokens []int32     `json:"tokens"`
		Shape  []int       `json:"shape"`
		Logits [][]float32 `json:"logits"`
		Prompt string      `json:"prompt"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(out, "goddp_logits.json")), &ref); err != nil {
		t.Fatal(err)
	}
	T := len(ref.Tokens)
	if T != 32 || ref.Shape[1] != T || ref.Shape[2] != 64 || len(ref.Logits) != T || len(ref.Logits[0]) != 64 || !strings.HasPrefix(checkpoint.CheckPrompt, ref.Prompt[:10]) {
		t.Fatalf("goddp_logits.json: %d tokens, shape %v", T, ref.Shape)
	}
	m, spec, err := model.Open(cpu.New(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if spec.Vocab != 64 {
		t.Errorf("the export opens with vocab %d", spec.Vocab)
	}
	got := logitsOf(t, m, ref.Tokens, T)
	for i := 0; i < T; i++ {
		for v := 0; v < 64; v++ {
			if got[i*64+v] != ref.Logits[i][v] {
				t.Fatalf("logit (%d,%d): %g from the export, %g in goddp_logits.json", i, v, got[i*64+v], ref.Logits[i][v])
			}
		}
	}
	if _, err := checkpoint.Export(ck, checkpoint.ExportOptions{Format: "onnx", Out: out}); err == nil || !strings.Contains(err.Error(), "onnx") {
		t.Errorf("unknown format: %v", err)
	}
}
