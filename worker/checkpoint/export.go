package checkpoint

// export.go: `ddptrain export`, a checkpoint's weights in another layout. Hugging Face
// GPT2LMHeadModel's (format hf) is the one: OUT/model.safetensors and OUT/config.json, loadable
// with transformers' from_pretrained(OUT). The checkpoint says what model it holds (config.json,
// model.Spec), so no run config is needed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/data"
)

// ExportOptions says what Export writes.
type ExportOptions struct {
	Format string // "hf"
	Out    string // the directory written
	// CheckLogits also writes OUT/goddp_logits.json: goddp's own f32 logits (the CPU device) of
	// CheckPrompt, for scripts/check_hf_export.py to compare with transformers'.
	CheckLogits bool
	// Spec is the model's spec for a checkpoint written before checkpoints carried one (nil:
	// the checkpoint's own, which a checkpoint of this build always has).
	Spec *model.Spec
}

// CheckPrompt is the text of goddp_logits.json: GPT-2 BPE ids for a GPT-2 vocabulary, its bytes
// (mod the vocabulary) for other ones.
const CheckPrompt = "Hello, I'm a language model, and light is refracted by the prism"

// ExportResult says what Export wrote.
type ExportResult struct {
	Checkpoint string   // the checkpoint directory exported
	Step       int      // its step
	Files      []string // the files written
	Spec       model.Spec
}

// Export writes the checkpoint at path (a step directory, or a checkpoint.dir: its newest that
// verifies) in opt.Format to opt.Out. The checkpoint is verified against its manifest first.
func Export(path string, opt ExportOptions) (*ExportResult, error) {
	if opt.Format != "hf" {
		return nil, fmt.Errorf("worker: export --format %q: want hf (Hugging Face GPT2LMHeadModel)", opt.Format)
	}
	if opt.Out == "" {
		return nil, fmt.Errorf("worker: export needs --out DIR")
	}
	src, err := exportSource(path)
	if err != nil {
		return nil, err
	}
	ck, err := Load(src)
	if err != nil {
		return nil, err
	}
	spec := ck.Spec
	if opt.Spec != nil {
		spec = opt.Spec
	}
	if spec == nil {
		return nil, fmt.Errorf("worker: export: %s carries no model spec (written before checkpoints had config.json): pass --config with the run's YAML", src)
	}
	if spec.Kind != model.SpecKindGPT {
		return nil, fmt.Errorf("worker: export: %s holds a %s model; --format hf is for GPT models", src, spec.Kind)
	}
	hf, err := model.ToHFGPT2(*spec, ck.Weights)
	if err != nil {
		return nil, fmt.Errorf("worker: export %s: %w", src, err)
	}
	hc, err := spec.HFGPT2Config()
	if err != nil {
		return nil, fmt.Errorf("worker: export %s: %w", src, err)
	}
	var st bytes.Buffer
	// "format": "pt" is what transformers' safetensors loader wants to see.
	if err := model.WriteSafetensors(&st, hf, map[string]string{"format": "pt"}); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, fmt.Errorf("worker: export: %w", err)
	}
	res := &ExportResult{Checkpoint: src, Step: ck.Step, Spec: *spec}
	write := func(name string, b []byte) error {
		p := filepath.Join(opt.Out, name)
		if err := writeFileAtomic(p, b); err != nil {
			return err
		}
		res.Files = append(res.Files, p)
		return nil
	}
	if err := write(model.WeightsFile, st.Bytes()); err != nil {
		return nil, err
	}
	if err := write(model.ConfigFile, hc.JSON()); err != nil {
		return nil, err
	}
	if opt.CheckLogits {
		b, err := checkLogitsJSON(*spec, ck)
		if err != nil {
			return nil, err
		}
		if err := write("goddp_logits.json", b); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// exportSource is path itself when it is a checkpoint (a MANIFEST.json inside), else the newest
// checkpoint that verifies in it.
func exportSource(path string) (string, error) {
	if _, err := os.Stat(filepath.Join(path, FileManifest)); err == nil {
		return path, nil
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("worker: export: %w", err)
	}
	latest, err := Resume(path, false, slog.Default())
	if err != nil {
		return "", fmt.Errorf("worker: export: %w", err)
	}
	if latest == "" {
		return "", fmt.Errorf("worker: export: %s is neither a checkpoint (no %s) nor a directory of them", path, FileManifest)
	}
	return latest, nil
}

// checkLogitsJSON is goddp_logits.json: the checkpoint's model run by goddp on the CPU in f32 on
// CheckPrompt's tokens, its logits without the padded vocabulary's columns.
func checkLogitsJSON(spec model.Spec, ck *Checkpoint) ([]byte, error) {
	m, err := model.New(cpu.New(), spec, 0)
	if err != nil {
		return nil, err
	}
	defer m.Free()
	if err := m.Params().LoadNamed(ck.Weights); err != nil {
		return nil, fmt.Errorf("worker: export %s: %w", ck.Path, err)
	}
	ids, err := checkTokens(spec)
	if err != nil {
		return nil, err
	}
	logits, err := m.(*model.GPT).Logits(ids, 1, len(ids))
	if err != nil {
		return nil, err
	}
	V, Vp := spec.VocabTokens(), spec.Vocab
	var b bytes.Buffer
	tok, _ := json.Marshal(ids)
	prompt, _ := json.Marshal(CheckPrompt)
	src, _ := json.Marshal(ck.Path)
	fmt.Fprintf(&b, "{\n  \"checkpoint\": %s,\n  \"step\": %d,\n  \"prompt\": %s,\n  \"tokens\": %s,\n  \"shape\": [1, %d, %d],\n  \"device\": \"cpu f32\",\n  \"logits\": [",
		src, ck.Step, prompt, tok, len(ids), V)
	for t := range ids {
		if t > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    [")
		for v := 0; v < V; v++ {
			if v > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatFloat(float64(logits[t*Vp+v]), 'g', -1, 32))
		}
		b.WriteByte(']')
	}
	b.WriteString("\n  ]\n}\n")
	return b.Bytes(), nil
}

// checkTokens are CheckPrompt's ids for spec's vocabulary, at most Context of them.
func checkTokens(spec model.Spec) ([]int32, error) {
	var ids []int32
	if spec.VocabTokens() >= 50257 {
		enc, err := data.NewEncoder("gpt2")
		if err != nil {
			return nil, err
		}
		xs, err := enc.Encode(CheckPrompt)
		if err != nil {
			return nil, err
		}
		for _, x := range xs {
			ids = append(ids, int32(x))
		}
	} else {
		for _, c := range []byte(CheckPrompt) {
			ids = append(ids, int32(int(c)%spec.VocabTokens()))
		}
	}
	if len(ids) > spec.Context {
		ids = ids[:spec.Context]
	}
	return ids, nil
}

// writeFileAtomic is data.WriteFileAtomic, its error naming the file.
func writeFileAtomic(path string, b []byte) error {
	if err := data.WriteFileAtomic(path, b); err != nil {
		return fmt.Errorf("worker: writing %s: %w", path, err)
	}
	return nil
}
