package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// randomGPT is a small f32 GPT whose every parameter (LayerNorm gains and biases included) is
// random, so that a misplaced or untransposed tensor changes the logits.
func randomGPT(t *testing.T, cfg GPTConfig) *GPT {
	t.Helper()
	m, err := NewGPT(cpu.New(), cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.ps.List {
		m.dev.RandNormal(p.W, 0.3, tensor.DeriveSeed(5, p.Name))
	}
	return m
}

func testTokens(n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % vocab)
	}
	return ids
}

// gptShapes registers what NewGPT registers: the same names and shapes.
func TestGPTShapes_matchNewGPT(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := GPTConfig{Layers: 3, Width: 16, Heads: 2, Context: 8, Vocab: 50, Tied: tied}
		m, err := NewGPT(cpu.New(), cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := gptShapes(cfg)
		if len(want) != len(m.ps.List) {
			t.Fatalf("tied %v: gptShapes has %d parameters, NewGPT %d", tied, len(want), len(m.ps.List))
		}
		for _, p := range m.ps.List {
			if fmt.Sprint(want[p.Name]) != fmt.Sprint(p.Shape) {
				t.Errorf("tied %v: %s: gptShapes %v, NewGPT %v", tied, p.Name, want[p.Name], p.Shape)
			}
		}
		m.Free()
	}
}

// goddp → HF → goddp gives back every tensor to the bit; with a padded vocabulary the used rows
// come back exactly and the padding as the mean of the used rows. Every Conv1D matrix is the
// transpose of goddp's.
func TestHFGPT2_roundTripBitExact(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       GPTConfig
		vocabUsed int
	}{
		{"tied", GPTConfig{Layers: 2, Width: 16, Heads: 4, Context: 8, Vocab: 40, Tied: true}, 0},
		{"untied", GPTConfig{Layers: 2, Width: 16, Heads: 4, Context: 8, Vocab: 40, Tied: false}, 0},
		{"padded vocab", GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 8, Vocab: 48, Tied: true}, 37},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := randomGPT(t, c.cfg)
			defer m.Free()
			spec := c.cfg.Spec()
			spec.VocabUsed = c.vocabUsed
			orig := m.ps.NamedWeights()
			hf, err := ToHFGPT2(spec, orig)
			if err != nil {
				t.Fatal(err)
			}
			byHF := map[string]NamedTensor{}
			for _, x := range hf {
				byHF[x.Name] = x
			}
			if _, ok := byHF["lm_head.weight"]; ok == c.cfg.Tied {
				t.Errorf("lm_head.weight present: %v, tied %v", ok, c.cfg.Tied)
			}
			C := c.cfg.Width
			attn := byHF["transformer.h.1.attn.c_attn.weight"]
			if c.cfg.Layers > 1 {
				q := BytesF32(orig[m.ps.Get("h.1.attn.qkv.w").Index].Data) // (3C,C)
				a := BytesF32(attn.Data)                                   // (C,3C)
				if fmt.Sprint(attn.Shape) != fmt.Sprint([]int{C, 3 * C}) || a[5*3*C+2] != q[2*C+5] {
					t.Errorf("c_attn.weight %v is not qkv.wᵀ", attn.Shape)
				}
			}
			if v := spec.VocabTokens(); fmt.Sprint(byHF["transformer.wte.weight"].Shape) != fmt.Sprint([]int{v, C}) {
				t.Errorf("wte %v, want (%d,%d)", byHF["transformer.wte.weight"].Shape, v, C)
			}
			back, err := FromHFGPT2(spec, hf)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(orig) {
				t.Fatalf("%d tensors back, %d out", len(back), len(orig))
			}
			want := map[string]NamedTensor{}
			for _, x := range orig {
				want[x.Name] = x
			}
			for _, b := range back {
				w := want[b.Name]
				if fmt.Sprint(b.Shape) != fmt.Sprint(w.Shape) {
					t.Fatalf("%s: shape %v back, %v out", b.Name, b.Shape, w.Shape)
				}
				if b.Name == "wte" && c.vocabUsed > 0 {
					n := c.vocabUsed * C * 4
					if !bytes.Equal(b.Data[:n], w.Data[:n]) {
						t.Errorf("wte: the used rows are not exact")
					}
					got, orig := BytesF32(b.Data), BytesF32(w.Data)
					for j := 0; j < C; j++ {
						var m float64
						for i := 0; i < c.vocabUsed; i++ {
							m += float64(orig[i*C+j])
						}
						for i := c.vocabUsed; i < c.cfg.Vocab; i++ {
							if got[i*C+j] != float32(m/float64(c.vocabUsed)) {
								t.Fatalf("wte padding row %d column %d is %g, not the mean row's %g", i, j, got[i*C+j], m/float64(c.vocabUsed))
							}
						}
					}
					continue
				}
				if !bytes.Equal(b.Data, w.Data) {
					t.Errorf("%s: not bit-identical after the round trip", b.Name)
				}
			}
		})
	}
}

// writeHFDir writes weights in HF's layout and its config.json, as an export does, in dtype dt.
func writeHFDir(t *testing.T, dir string, spec Spec, ts []NamedTensor, dt tensor.DType) {
	t.Helper()
	hf, err := ToHFGPT2(spec, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hf {
		v := BytesF32(hf[i].Data)
		switch dt {
		case tensor.F16:
			hf[i].DType, hf[i].Data = dt, F16Bytes(v)
		case tensor.BF16:
			hf[i].DType, hf[i].Data = dt, BF16Bytes(v)
		}
	}
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, hf, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, WeightsFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	hc, err := spec.HFGPT2Config()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), hc.JSON(), 0o644)
}

// A model written in HF's layout (f32) opens (Open reads config.json) and gives the same logits to
// the bit as the model it came from; in BF16 it gives the logits of the bf16-rounded weights.
func TestOpen_hfDirectoryGivesTheSameLogits(t *testing.T) {
	cfg := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: true}
	m := randomGPT(t, cfg)
	defer m.Free()
	ids := testTokens(2*10, cfg.Vocab)
	want, err := m.Logits(ids, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "hf")
	writeHFDir(t, dir, cfg.Spec(), m.ps.NamedWeights(), tensor.F32)
	got, spec, err := Open(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Free()
	if spec.Layers != 2 || spec.Width != 32 || spec.Vocab != 64 || !spec.Tied {
		t.Errorf("spec from config.json: %+v", spec)
	}
	logits, err := got.(*GPT).Logits(ids, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 2*10*64 {
		t.Fatalf("%d logits", len(logits))
	}
	for i := range want {
		if logits[i] != want[i] {
			t.Fatalf("logit %d: %g from the HF layout, %g from the model", i, logits[i], want[i])
		}
	}

	// BF16 on disk: widened to f32 on load; equal to a model holding the rounded weights.
	bdir := filepath.Join(t.TempDir(), "hf-bf16")
	writeHFDir(t, bdir, cfg.Spec(), m.ps.NamedWeights(), tensor.BF16)
	bm, _, err := Open(cpu.New(), bdir)
	if err != nil {
		t.Fatal(err)
	}
	defer bm.Free()
	w := m.ps.Host()
	rounded := make([]float32, len(w))
	for i, x := range w {
		rounded[i] = half.BF16ToFloat32(half.BF16FromFloat32(x))
	}
	if got := bm.Params().Host(); HashF32(got) != HashF32(rounded) {
		t.Error("BF16 weights did not load as the bf16-rounded f32 weights")
	}
}

// Errors name what is wrong: a missing tensor, a wrong shape, a config that does not fit.
func TestFromHFGPT2_refusesWhatDoesNotFit(t *testing.T) {
	cfg := GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 8, Vocab: 40, Tied: true}
	m := randomGPT(t, cfg)
	defer m.Free()
	hf, err := ToHFGPT2(cfg.Spec(), m.ps.NamedWeights())
	if err != nil {
		t.Fatal(err)
	}
	drop := hf[1:]
	if _, err := FromHFGPT2(cfg.Spec(), drop); err == nil || !strings.Contains(err.Error(), hf[0].Name) {
		t.Errorf("missing %s: %v", hf[0].Name, err)
	}
	wide := cfg
	wide.Width, wide.Heads = 32, 4
	if _, err := FromHFGPT2(wide.Spec(), hf); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Errorf("another width: %v", err)
	}
	hc, _ := cfg.Spec().HFGPT2Config()
	hc.ActivationFunction = "gelu"
	if err := hc.CheckFits(cfg.Spec()); err == nil || !strings.Contains(err.Error(), "gelu") {
		t.Errorf("exact GELU accepted: %v", err)
	}
	hc, _ = cfg.Spec().HFGPT2Config()
	hc.NLayer = 2
	if err := hc.CheckFits(cfg.Spec()); err == nil || !strings.Contains(err.Error(), "n_layer 2") {
		t.Errorf("another depth: %v", err)
	}
	// GPT2Model's names (no "transformer."), GPT-2's mask buffers and a longer wpe load too.
	var bare []NamedTensor
	for _, x := range hf {
		x.Name = strings.TrimPrefix(x.Name, "transformer.")
		if x.Name == "wpe.weight" {
			v := BytesF32(x.Data)
			x.Data, x.Shape = F32Bytes(append(v, make([]float32, 4*16)...)), []int{12, 16}
		}
		bare = append(bare, x)
	}
	bare = append(bare, NamedTensor{Name: "h.0.attn.bias", DType: tensor.F32, Shape: []int{1}, Data: F32Bytes([]float32{1})})
	back, err := FromHFGPT2(cfg.Spec(), bare)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ps.LoadNamed(back); err != nil {
		t.Fatal(err)
	}
}

// A spec goes into __metadata__ and config.json and comes back equal; a spec of something goddp
// does not compute is refused, naming the field.
func TestSpec_roundTrips(t *testing.T) {
	s := GPTConfig{Layers: 12, Width: 768, Heads: 12, Context: 1024, Vocab: 50304, Tied: true}.Spec()
	s.VocabUsed = 50257
	meta := s.Metadata()
	meta["format"] = "pt"
	if meta["model.kind"] != "gpt" || meta["model.layers"] != "12" || meta["model.gelu_approx"] != "tanh" || meta["model.layer_norm_eps"] != "0.00001" {
		t.Errorf("metadata %v", meta)
	}
	back, ok, err := SpecFromMetadata(meta)
	if err != nil || !ok || fmt.Sprint(back) != fmt.Sprint(s) {
		t.Errorf("from metadata: %+v, %v, %v; want %+v", back, ok, err, s)
	}
	js, err := ParseSpec(s.JSON())
	if err != nil || fmt.Sprint(js) != fmt.Sprint(s) {
		t.Errorf("from JSON: %+v, %v", js, err)
	}
	mlp := MLPConfig{Widths: []int{784, 32, 10}}.Spec()
	mlp.InputNormalization = "(x/255 - 0.1307)/0.3081"
	if back, _, err := SpecFromMetadata(mlp.Metadata()); err != nil || fmt.Sprint(back) != fmt.Sprint(mlp) {
		t.Errorf("mlp from metadata: %+v, %v", back, err)
	}
	bad := s
	bad.GELUApprox = "none"
	if _, err := bad.GPTConfig(); err == nil || !strings.Contains(err.Error(), "gelu_approx") {
		t.Errorf("exact GELU: %v", err)
	}
	bad = s
	bad.LayerNormEps = 1e-6
	if _, err := bad.GPTConfig(); err == nil || !strings.Contains(err.Error(), "layer_norm_eps") {
		t.Errorf("another eps: %v", err)
	}
	if _, err := ParseSpec([]byte(`{"format":"goddp","kind":"gpt","rope":true}`)); err == nil || !strings.Contains(err.Error(), "rope") {
		t.Errorf("unknown field: %v", err)
	}
	if _, ok, _ := SpecFromMetadata(map[string]string{"format": "pt"}); ok {
		t.Error("a spec found in metadata without one")
	}
}

// LoadNamed is all or nothing and names the tensor at fault.
func TestParams_loadNamedAllOrNothing(t *testing.T) {
	cfg := GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 8, Vocab: 40, Tied: true}
	m := randomGPT(t, cfg)
	defer m.Free()
	before := m.ps.SHA256()
	ts := m.ps.NamedWeights()
	for i := range ts {
		ts[i].Data = F32Bytes(make([]float32, len(ts[i].Data)/4)) // zeros
	}
	bad := append([]NamedTensor(nil), ts...)
	bad[len(bad)-1].Shape = []int{len(bad[len(bad)-1].Data) / 4, 1}
	if err := m.ps.LoadNamed(bad); err == nil || !strings.Contains(err.Error(), bad[len(bad)-1].Name) {
		t.Errorf("wrong shape: %v", err)
	}
	extra := append(append([]NamedTensor(nil), ts...), NamedTensor{Name: "lm_head.w", DType: tensor.F32, Shape: []int{1}, Data: F32Bytes([]float32{0})})
	if err := m.ps.LoadNamed(extra); err == nil || !strings.Contains(err.Error(), `"lm_head.w" is not a parameter`) {
		t.Errorf("extra tensor: %v", err)
	}
	if m.ps.SHA256() != before {
		t.Fatal("a refused load wrote weights")
	}
	if err := m.ps.LoadNamed(ts); err != nil {
		t.Fatal(err)
	}
	if m.ps.SHA256() == before {
		t.Error("a good load changed nothing")
	}
}

// Issue 30, item 7: a lone Hugging Face .safetensors file gets the fit check too. With its
// config.json beside it, a model of another head count is refused naming n_head; with none, the
// file is refused (the head count is in no tensor); an untied lm_head.weight going into a tied
// model is refused naming it, where a copy of wte (a tied export) loads.
func TestReadWeights_loneHFFileIsChecked(t *testing.T) {
	cfg := GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 8, Vocab: 40, Tied: true}
	m := randomGPT(t, cfg)
	defer m.Free()
	dir := t.TempDir()
	writeHFDir(t, dir, cfg.Spec(), m.ps.NamedWeights(), tensor.F32)
	file := filepath.Join(dir, WeightsFile)
	other := cfg
	other.Heads = 4
	w, err := ReadWeights(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.For(other.Spec()); err == nil || !strings.Contains(err.Error(), "n_head 2, model.heads 4") {
		t.Errorf("a lone file with config.json beside it, into a model of 4 heads: %v", err)
	}
	if _, err := w.For(cfg.Spec()); err != nil {
		t.Errorf("a lone file that fits: %v", err)
	}
	os.Remove(filepath.Join(dir, ConfigFile))
	if w, err = ReadWeights(file); err != nil {
		t.Fatal(err)
	}
	if _, err := w.For(other.Spec()); err == nil || !strings.Contains(err.Error(), "n_head") {
		t.Errorf("a lone file without config.json: %v, want a refusal naming n_head", err)
	}

	hf, err := ToHFGPT2(cfg.Spec(), m.ps.NamedWeights())
	if err != nil {
		t.Fatal(err)
	}
	var wte NamedTensor
	for _, x := range hf {
		if x.Name == "transformer.wte.weight" {
			wte = x
		}
	}
	if wte.Name == "" {
		t.Fatal("no transformer.wte.weight in the export")
	}
	copyHead := NamedTensor{Name: "lm_head.weight", DType: wte.DType, Shape: wte.Shape, Data: bytes.Clone(wte.Data)}
	if _, err := FromHFGPT2(cfg.Spec(), append(append([]NamedTensor(nil), hf...), copyHead)); err != nil {
		t.Errorf("a tied lm_head (a copy of wte): %v", err)
	}
	v := BytesF32(copyHead.Data)
	v[0]++
	untied := copyHead
	untied.Data = F32Bytes(v)
	if _, err := FromHFGPT2(cfg.Spec(), append(append([]NamedTensor(nil), hf...), untied)); err == nil || !strings.Contains(err.Error(), `"lm_head.weight"`) {
		t.Errorf("an untied lm_head into a tied model: %v, want a refusal naming it", err)
	}
}
