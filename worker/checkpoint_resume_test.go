package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/checkpoint"
)

// Through the trainer: a checkpoint directory holding only a corrupted checkpoint stops New
// instead of training from random weights; checkpoint.fresh_if_broken starts from step 0.
func TestTrainer_allCheckpointsBrokenRefused(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if _, err := Run(context.Background(), tinyGPT(t, "train.micro_batch=4", "checkpoint.dir="+ck), Options{Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	paths, _, _ := checkpoint.StepDirs(ck)
	if len(paths) != 1 {
		t.Fatalf("checkpoints %v", paths)
	}
	w := filepath.Join(paths[0], checkpoint.FileWeights)
	b, _ := os.ReadFile(w)
	b[len(b)/2] ^= 0x40
	os.WriteFile(w, b, 0o644)
	_, err := New(context.Background(), tinyGPT(t, "train.micro_batch=4", "checkpoint.dir="+ck), Options{Logger: quiet()})
	if !errors.Is(err, checkpoint.ErrAllBroken) || !strings.Contains(err.Error(), w) {
		t.Fatalf("New = %v, want every checkpoint broken, naming %s", err, w)
	}
	tr, err := New(context.Background(), tinyGPT(t, "train.micro_batch=4", "checkpoint.dir="+ck, "checkpoint.fresh_if_broken=true"), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.st.Step != 0 {
		t.Errorf("fresh start at step %d", tr.st.Step)
	}
}

// A checkpoint carries its model: config.json and the weights' __metadata__ give the run's spec,
// and model.Open builds the trained model from the directory alone.
func TestCheckpoint_standsAlone(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	cfg := tinyGPT(t, "train.micro_batch=4", "checkpoint.dir="+ck, "model.vocab=300", "model.vocab_used=256")
	res, err := Run(context.Background(), cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := checkpoint.Latest(ck)
	c, err := checkpoint.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModelSpec(cfg)
	if c.Spec == nil || string(c.Spec.JSON()) != string(want.JSON()) {
		t.Fatalf("checkpoint spec %+v, want %+v", c.Spec, want)
	}
	if c.Spec.VocabUsed != 256 || c.Spec.GELUApprox != "tanh" || c.Spec.LayerNormEps != 1e-5 || c.Spec.Heads != 4 {
		t.Errorf("spec %+v", c.Spec)
	}
	_, meta, _ := model.ParseSafetensors(mustRead(t, filepath.Join(p, checkpoint.FileWeights)))
	if fromMeta, ok, err := model.SpecFromMetadata(meta); !ok || err != nil || string(fromMeta.JSON()) != string(want.JSON()) {
		t.Errorf("__metadata__ spec %+v %v %v", fromMeta, ok, err)
	}
	m, spec, err := model.Open(cpu.New(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if spec.Layers != 2 || m.Params().SHA256() != res.ParamSHA256 {
		t.Errorf("opened %+v with weights %.12s, the run ended with %.12s", spec, m.Params().SHA256(), res.ParamSHA256)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
