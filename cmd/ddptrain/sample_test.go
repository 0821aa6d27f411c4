package main

// Tests of `ddptrain sample`: in-process on checkpoints the test writes (a random GPT saved the
// way the trainer saves one), and the real binary on a checkpoint the worker trained.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/checkpoint"
)

// saveRandomGPT writes a checkpoint of step 3 of a fresh GPT into dir (as checkpoint.State.Save
// does: every parameter by name, f32) and a YAML config describing it; it returns the model (on
// the CPU, for the expected output) and the YAML's path.
func saveRandomGPT(t *testing.T, dir string, cfg model.GPTConfig) (*model.GPT, string) {
	t.Helper()
	m, err := model.NewGPT(cpu.New(), cfg, 17)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	var weights []model.NamedTensor
	for _, p := range m.Params().List {
		weights = append(weights, model.NamedTensor{Name: p.Name, DType: tensor.F32, Shape: p.Shape, Data: model.F32Bytes(tensor.ToHost(p.W))})
	}
	if _, err := checkpoint.Save(dir, 3, weights, nil, map[string]int{"step": 3}); err != nil {
		t.Fatal(err)
	}
	yaml := filepath.Join(t.TempDir(), "run.yaml")
	text := fmt.Sprintf("model:\n  kind: gpt\n  layers: %d\n  width: %d\n  heads: %d\n  context: %d\n  vocab: %d\n  tied: %v\ntrain:\n  max_steps: 1\n  micro_batch: 1\n  lr: 1.0e-3\ndata:\n  kind: text\n",
		cfg.Layers, cfg.Width, cfg.Heads, cfg.Context, cfg.Vocab, cfg.Tied)
	if err := os.WriteFile(yaml, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return m, yaml
}

// sample runs `ddptrain sample args…` in-process: exit status, stdout, stderr.
func sample(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := runSample(append([]string{"--device", "cpu"}, args...), &out, &errb)
	return rc, out.String(), errb.String()
}

func sampleJSON(t *testing.T, args ...string) sampleOutput {
	t.Helper()
	rc, out, errs := sample(append(args, "--json")...)
	if rc != 0 {
		t.Fatalf("sample %v: exit %d\n%s", args, rc, errs)
	}
	var o sampleOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("sample --json printed %q: %v", out, err)
	}
	return o
}

func TestSample_byteLevelCheckpoint(t *testing.T) {
	cfg := model.GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 256, Tied: true}
	ckdir := t.TempDir()
	m, yaml := saveRandomGPT(t, ckdir, cfg)
	step := filepath.Join(ckdir, "step-00000003")
	const prompt = "Of the Refrangibility"

	// Greedy through the CLI = greedy through the model package on the same weights.
	d := m.NewDecoder()
	defer d.Free()
	ids := make([]int32, len(prompt))
	for i := range prompt {
		ids[i] = int32(prompt[i])
	}
	want, err := d.Generate(ids, model.GenerateOptions{MaxNewTokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	o := sampleJSON(t, "--checkpoint", step, "--config", yaml, "--prompt", prompt, "--max-new-tokens", "30", "--temperature", "0")
	if fmt.Sprint(o.PromptIDs) != fmt.Sprint(ids) || fmt.Sprint(o.GeneratedIDs) != fmt.Sprint(want.Tokens) {
		t.Fatalf("prompt ids %v (want %v), generated %v (want %v)", o.PromptIDs, ids, o.GeneratedIDs, want.Tokens)
	}
	if o.Tokenizer != "bytes" || o.Step != 3 || o.Checkpoint != step || o.Slides != want.Slides || want.Slides == 0 {
		t.Fatalf("tokenizer %q, step %d, checkpoint %s, slides %d (want %d > 0)", o.Tokenizer, o.Step, o.Checkpoint, o.Slides, want.Slides)
	}
	var b strings.Builder
	for _, id := range o.GeneratedIDs {
		b.WriteByte(byte(id))
	}
	var completion string // JSON's text: each byte of invalid UTF-8 becomes U+FFFD
	if j, err := json.Marshal(b.String()); err != nil || json.Unmarshal(j, &completion) != nil {
		t.Fatal(err)
	}
	if o.Completion != completion || o.Text != prompt+o.Completion {
		t.Fatalf("completion %q, text %q", o.Completion, o.Text)
	}

	// The checkpoint.dir finds step-3; --slide-keep 16 slides by one, as the model package does.
	o2 := sampleJSON(t, "--checkpoint", ckdir, "--config", yaml, "--prompt", prompt, "--max-new-tokens", "30", "--temperature", "0", "--slide-keep", "16")
	want2, err := d.Generate(ids, model.GenerateOptions{MaxNewTokens: 30, SlideKeep: 16})
	if err != nil {
		t.Fatal(err)
	}
	if o2.Checkpoint != step || fmt.Sprint(o2.GeneratedIDs) != fmt.Sprint(want2.Tokens) {
		t.Fatalf("from the checkpoint.dir: %s, %v; want %s, %v", o2.Checkpoint, o2.GeneratedIDs, step, want2.Tokens)
	}

	// A seed repeats itself; another seed, other text.
	seeded := func(seed string) string {
		return fmt.Sprint(sampleJSON(t, "--checkpoint", step, "--config", yaml, "--prompt", prompt, "--max-new-tokens", "40",
			"--temperature", "1.5", "--top-k", "50", "--seed", seed).GeneratedIDs)
	}
	if a, b, c := seeded("9"), seeded("9"), seeded("10"); a != b || a == c {
		t.Fatalf("seed 9: %s and %s; seed 10: %s", a, b, c)
	}

	// Text mode streams the prompt and the completion's bytes to stdout, the timing to stderr.
	rc, out, errs := sample("--checkpoint", step, "--config", yaml, "--prompt", prompt, "--max-new-tokens", "30", "--temperature", "0")
	if rc != 0 || out != prompt+b.String()+"\n" || !strings.Contains(errs, "tokens/s") { // the bytes as they are
		t.Fatalf("exit %d, stdout %q (want %q), stderr %q", rc, out, prompt+b.String()+"\n", errs)
	}
}

// The model's shape from a config.json in the checkpoint (goddp's names) or in the checkpoint.dir
// (Hugging Face's); --config must agree with it; without either, the error says to pass --config.
func TestSample_configSources(t *testing.T) {
	cfg := model.GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 8, Vocab: 256, Tied: true}
	ckdir := t.TempDir()
	_, yaml := saveRandomGPT(t, ckdir, cfg)
	step := filepath.Join(ckdir, "step-00000003")
	args := []string{"--prompt", "abc", "--max-new-tokens", "12", "--temperature", "0"}
	want := sampleJSON(t, append([]string{"--checkpoint", step, "--config", yaml}, args...)...)

	rc, _, errs := sample(append([]string{"--checkpoint", step}, args...)...)
	if rc != exitFailed || !strings.Contains(errs, "--config") {
		t.Fatalf("no config: exit %d, %q", rc, errs)
	}

	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ckdir, "config.json"), `{"n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 8, "vocab_size": 256}`)
	if got := sampleJSON(t, append([]string{"--checkpoint", ckdir}, args...)...); fmt.Sprint(got.GeneratedIDs) != fmt.Sprint(want.GeneratedIDs) {
		t.Fatalf("HF config.json: %v, want %v", got.GeneratedIDs, want.GeneratedIDs)
	}
	write(filepath.Join(step, "config.json"), `{"model": {"layers": 1, "width": 16, "heads": 2, "context": 8, "vocab": 256, "tied": true}}`)
	if got := sampleJSON(t, append([]string{"--checkpoint", step, "--config", yaml}, args...)...); fmt.Sprint(got.GeneratedIDs) != fmt.Sprint(want.GeneratedIDs) {
		t.Fatalf("goddp config.json: %v, want %v", got.GeneratedIDs, want.GeneratedIDs)
	}

	write(filepath.Join(step, "config.json"), `{"layers": 1, "width": 16, "heads": 2, "context": 8, "vocab": 256, "tied": false}`)
	rc, _, errs = sample(append([]string{"--checkpoint", step, "--config", yaml}, args...)...)
	if rc != exitFailed || !strings.Contains(errs, "tied true") || !strings.Contains(errs, "tied false") {
		t.Fatalf("--config and config.json disagree: exit %d, %q", rc, errs)
	}
	rc, _, errs = sample(append([]string{"--checkpoint", step}, args...)...)
	if rc != exitFailed || !strings.Contains(errs, `"lm_head.w"`) {
		t.Fatalf("an untied config for a tied checkpoint: exit %d, %q", rc, errs)
	}
	write(filepath.Join(step, "config.json"), `{"layers": 1}`)
	if rc, _, errs = sample(append([]string{"--checkpoint", step}, args...)...); rc != exitFailed || !strings.Contains(errs, "config.json") {
		t.Fatalf("a config.json without the sizes: exit %d, %q", rc, errs)
	}

	if err := os.Remove(filepath.Join(step, "config.json")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--temperature", "-1"}, {"--top-k", "-2"}, {"--max-new-tokens", "-1"}, {"--bogus"}} {
		if rc, _, _ := sample(append([]string{"--checkpoint", step, "--config", yaml, "--prompt", "a"}, bad...)...); rc != exitUsage {
			t.Fatalf("%v: exit %d, want %d", bad, rc, exitUsage)
		}
	}
	if rc, _, errs := sample("--checkpoint", step, "--config", yaml, "--prompt", ""); rc != exitFailed || !strings.Contains(errs, "empty") {
		t.Fatalf("an empty prompt for bytes: exit %d, %q", rc, errs)
	}
}

// A GPT-2 vocabulary takes GPT-2's BPE; a padded one (llm.c's 50304) never samples a padding id;
// an empty prompt starts from <|endoftext|>.
func TestSample_gpt2Tokenizer(t *testing.T) {
	for _, vocab := range []int{50257, 50304} {
		cfg := model.GPTConfig{Layers: 1, Width: 16, Heads: 2, Context: 16, Vocab: vocab, Tied: true}
		ckdir := t.TempDir()
		_, yaml := saveRandomGPT(t, ckdir, cfg)
		o := sampleJSON(t, "--checkpoint", ckdir, "--config", yaml, "--prompt", "Hello world", "--max-new-tokens", "20", "--temperature", "1e6")
		if o.Tokenizer != "gpt2" || fmt.Sprint(o.PromptIDs) != "[15496 995]" || len(o.GeneratedIDs) != 20 {
			t.Fatalf("vocab %d: tokenizer %q, prompt ids %v, %d generated", vocab, o.Tokenizer, o.PromptIDs, len(o.GeneratedIDs))
		}
		for _, id := range o.GeneratedIDs {
			if id >= 50257 {
				t.Fatalf("vocab %d: sampled the padding id %d", vocab, id)
			}
		}
		if !strings.HasPrefix(o.Text, "Hello world") || o.Completion == "" {
			t.Fatalf("vocab %d: text %q, completion %q", vocab, o.Text, o.Completion)
		}
		o = sampleJSON(t, "--checkpoint", ckdir, "--config", yaml, "--prompt", "", "--max-new-tokens", "3")
		if fmt.Sprint(o.PromptIDs) != "[50256]" {
			t.Fatalf("empty prompt: ids %v, want [50256]", o.PromptIDs)
		}
	}
}

// The whole path: the worker trains configs/opticks-gpt-tiny.yaml for a few steps and writes a
// checkpoint; the ddptrain binary samples from it past the model's context (the window slides).
func TestSample_trainedCheckpointBinary(t *testing.T) {
	ckdir := t.TempDir()
	const cfgPath = "../../configs/opticks-gpt-tiny.yaml"
	cfg, err := worker.LoadConfig(cfgPath, []string{"train.max_steps=6", "train.micro_batch=4", "train.warmup_steps=2",
		"train.eval_every=0", "checkpoint.dir=" + ckdir, "checkpoint.every=6", "data.workers=1"})
	if err != nil {
		t.Skipf("the Opticks text is not available: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := worker.Run(context.Background(), cfg, worker.Options{Device: "cpu", Logger: log}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binaries(t), "ddptrain")
	cmd := exec.Command(bin, "sample", "--checkpoint", ckdir, "--config", cfgPath, "--prompt", "The Light ",
		"--max-new-tokens", "80", "--temperature", "0.8", "--top-k", "40", "--seed", "3", "--json", "--device", "cpu")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var o sampleOutput
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if o.Step != 6 || len(o.GeneratedIDs) != 80 || o.Slides == 0 || len(o.PromptIDs) != len("The Light ") || !strings.HasPrefix(o.Text, "The Light ") {
		t.Fatalf("step %d, %d tokens, %d slides, prompt ids %v, text %q", o.Step, len(o.GeneratedIDs), o.Slides, o.PromptIDs, o.Text)
	}
	again, err := exec.Command(bin, "sample", "--checkpoint", ckdir, "--config", cfgPath, "--prompt", "The Light ",
		"--max-new-tokens", "80", "--temperature", "0.8", "--top-k", "40", "--seed", "3", "--json", "--device", "cpu").Output()
	if err != nil {
		t.Fatal(err)
	}
	var o2 sampleOutput
	if err := json.Unmarshal(again, &o2); err != nil || fmt.Sprint(o2.GeneratedIDs) != fmt.Sprint(o.GeneratedIDs) {
		t.Fatalf("the same seed again: %v (%v), first %v", o2.GeneratedIDs, err, o.GeneratedIDs)
	}
}

// scripts/check_hf_export.py (issue 29, item 9): a directory with --checkpoint is where to keep
// the export, not a usage error; without torch, one line naming the interpreter, no traceback.
func TestCheckHFExportScript_usageAndMissingTorch(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	if exec.Command(py, "-c", "import torch").Run() == nil {
		t.Skip("torch is installed here: the missing-torch message cannot be seen")
	}
	out, err := exec.Command(py, "../../scripts/check_hf_export.py", "--checkpoint", t.TempDir(), filepath.Join(t.TempDir(), "hf")).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Contains(string(out), "Traceback") ||
		strings.Contains(string(out), "give an export directory") || !strings.Contains(string(out), "torch is not importable by ") {
		t.Fatalf("check_hf_export.py --checkpoint DIR OUT without torch: %v\n%s", err, out)
	}
}
