package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/checkpoint"
)

// sourceGPT is a GPT of cfg's shape with random weights everywhere (gains and biases too), and
// the prompt its logits are compared on.
func sourceGPT(t *testing.T, cfg *Config) (*model.GPT, []int32) {
	t.Helper()
	m, err := model.NewGPT(cpu.New(), gptConfig(cfg), 99)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	for _, p := range m.Params().List {
		m.Params().Device().RandNormal(p.W, 0.2, tensor.DeriveSeed(7, p.Name))
	}
	ids := make([]int32, 2*cfg.Model.Context)
	for i := range ids {
		ids[i] = int32((i*31 + 5) % vocabTokens(cfg))
	}
	return m, ids
}

// writeHF writes m in Hugging Face GPT2LMHeadModel's layout (BF16 if bf16), with config.json.
func writeHF(t *testing.T, dir string, spec model.Spec, m *model.GPT, bf16 bool) {
	t.Helper()
	hf, err := model.ToHFGPT2(spec, m.Params().NamedWeights())
	if err != nil {
		t.Fatal(err)
	}
	if bf16 {
		for i := range hf {
			hf[i].DType, hf[i].Data = tensor.BF16, model.BF16Bytes(model.BytesF32(hf[i].Data))
		}
	}
	var buf bytes.Buffer
	if err := model.WriteSafetensors(&buf, hf, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, model.WeightsFile), buf.Bytes(), 0o644)
	hc, err := spec.HFGPT2Config()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, model.ConfigFile), hc.JSON(), 0o644)
}

func logitsOf(t *testing.T, m model.Model, ids []int32, T int) []float32 {
	t.Helper()
	g, ok := m.(*model.GPT)
	if !ok {
		t.Fatalf("model is a %T", m)
	}
	l, err := g.Logits(ids, len(ids)/T, T)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A Hugging Face-layout directory written here loads through model.init_from (padded
// vocabulary: 64 ids in 72 rows, the padding the mean row) and the trainer's model gives the logits of
// the model it came from, to the bit; goddp-named weights (a bare safetensors file) too.
func TestInitFrom_hfLayoutGivesTheSameLogits(t *testing.T) {
	shards := writeTokenShards(t, 64, 2000)
	base := tokensGPT(t, shards)
	src, ids := sourceGPT(t, base)
	spec, _ := ModelSpec(base)
	want := logitsOf(t, src, ids, base.Model.Context)

	hfDir := filepath.Join(t.TempDir(), "hf")
	writeHF(t, hfDir, spec, src, false)
	plain := filepath.Join(t.TempDir(), "weights.safetensors")
	var buf bytes.Buffer
	model.WriteSafetensors(&buf, src.Params().NamedWeights(), nil)
	os.WriteFile(plain, buf.Bytes(), 0o644)

	for _, from := range []string{hfDir, plain} {
		tr, err := New(context.Background(), tokensGPT(t, shards, "model.init_from="+from), Options{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		got := logitsOf(t, tr.m, ids, base.Model.Context)
		V, Vp := 64, 72
		for r := 0; r < len(ids); r++ {
			for v := 0; v < V; v++ { // the padded columns differ: the mean row stands for the dropped ones
				if got[r*Vp+v] != want[r*Vp+v] {
					tr.Close()
					t.Fatalf("%s: logit (%d,%d) is %g, the source model's %g", from, r, v, got[r*Vp+v], want[r*Vp+v])
				}
			}
		}
		if tr.st.InitFrom != from || tr.st.InitSHA256 != tr.ps.SHA256() {
			t.Errorf("state records init_from %q sha %.12s", tr.st.InitFrom, tr.st.InitSHA256)
		}
		tr.Close()
	}
}

// A run from init_from, killed after a checkpoint, resumes from the checkpoint even when
// init_from is gone (not in the hash; the checkpoint's weights supersede it) and ends
// bit-identical to the uninterrupted run; init_from and the initial weights' sha256 are recorded.
func TestInitFrom_resumeContinuesWithoutTheFile(t *testing.T) {
	shards := writeTokenShards(t, 64, 4000)
	base := tokensGPT(t, shards)
	src, _ := sourceGPT(t, base)
	spec, _ := ModelSpec(base)
	hfDir := filepath.Join(t.TempDir(), "hf")
	writeHF(t, hfDir, spec, src, true) // BF16 on disk

	straight, err := Run(context.Background(), tokensGPT(t, shards, "model.init_from="+hfDir, "train.max_steps=5"), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := Run(context.Background(), tokensGPT(t, shards, "train.max_steps=5"), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if scratch.ParamSHA256 == straight.ParamSHA256 {
		t.Fatal("init_from changed nothing")
	}
	ck := filepath.Join(t.TempDir(), "ck")
	cfg := tokensGPT(t, shards, "model.init_from="+hfDir, "train.max_steps=5", "checkpoint.dir="+ck, "checkpoint.every=2")
	planted := errors.New("planted")
	_, err = Run(context.Background(), cfg, Options{Logger: quiet(), FaultHook: func(step int) error {
		if step == 3 {
			return planted
		}
		return nil
	}})
	if !errors.Is(err, planted) {
		t.Fatalf("Run = %v, want the planted failure", err)
	}
	if err := os.RemoveAll(hfDir); err != nil {
		t.Fatal(err)
	}
	resumed, err := Run(context.Background(), cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("resume without the init_from file: %v", err)
	}
	if resumed.ParamSHA256 != straight.ParamSHA256 {
		t.Errorf("resumed run ends with %.12s, uninterrupted %.12s", resumed.ParamSHA256, straight.ParamSHA256)
	}
	ckPath, err := checkpoint.Latest(ck)
	if err != nil || ckPath == "" {
		t.Fatal(ckPath, err)
	}
	c, err := checkpoint.Load(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	var st checkpoint.State
	json.Unmarshal(c.State, &st)
	if st.InitFrom != hfDir || len(st.InitSHA256) != 64 {
		t.Errorf("state.json: init_from %q, init_sha256 %q", st.InitFrom, st.InitSHA256)
	}
}

// Weights of another model are refused naming what differs: a goddp checkpoint of another head
// count (same shapes), a Hugging Face config of another depth.
func TestInitFrom_refusesAnotherModel(t *testing.T) {
	shards := writeTokenShards(t, 64, 2000)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, err := Run(context.Background(), tokensGPT(t, shards, "model.heads=2", "checkpoint.dir="+ck), Options{Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), tokensGPT(t, shards, "model.init_from="+ck), Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "heads 2, the run's 4") {
		t.Errorf("another head count: %v", err)
	}
	base := tokensGPT(t, shards)
	src, _ := sourceGPT(t, base)
	spec, _ := ModelSpec(base)
	hfDir := filepath.Join(t.TempDir(), "hf")
	writeHF(t, hfDir, spec, src, false)
	_, err = New(context.Background(), tokensGPT(t, shards, "model.init_from="+hfDir, "model.layers=3"), Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "n_layer 2, model.layers 3") {
		t.Errorf("another depth: %v", err)
	}
	_, err = New(context.Background(), tokensGPT(t, shards, "model.init_from="+filepath.Join(hfDir, "nope")), Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "model.init_from") {
		t.Errorf("a missing file: %v", err)
	}
}
