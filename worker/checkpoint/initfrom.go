package checkpoint

// initfrom.go: model.init_from, a run that starts from given weights instead of a random init
// (fine-tuning GPT-2, continuing another run's weights with a fresh optimizer).

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goddp/goddp/model"
)

// LoadInitFrom sets ps, the parameters of the model spec describes, from the weights at path
// (config.Config's model.init_from): a safetensors file, or a directory holding model.safetensors
// (model.ReadWeights: a goddp checkpoint or export, a Hugging Face GPT-2), or a checkpoint.dir of
// another run (its newest checkpoint that verifies). A goddp checkpoint is verified against its
// manifest first. Weights that carry a spec must describe the same model (the heads included,
// which the shapes do not show); Hugging Face ones must fit it (model.HFGPT2Config.CheckFits).
// Nothing is written unless every tensor loads.
func LoadInitFrom(path string, spec model.Spec, ps *model.Params, log *slog.Logger) error {
	src, err := initFromSource(path)
	if err != nil {
		return fmt.Errorf("worker: model.init_from %s: %w", path, err)
	}
	w, err := model.ReadWeights(src)
	if err != nil {
		return fmt.Errorf("worker: model.init_from %s: %w", path, err)
	}
	if w.Spec != nil {
		if err := sameModel(*w.Spec, spec); err != nil {
			return fmt.Errorf("worker: model.init_from %s: %w", src, err)
		}
	}
	ts, err := w.For(spec)
	if err == nil {
		err = ps.LoadNamed(ts)
	}
	if err != nil {
		return fmt.Errorf("worker: model.init_from %s: %w", src, err)
	}
	layout := "goddp's names"
	if model.IsHFGPT2(w.Tensors) {
		layout = "Hugging Face GPT-2 names"
	}
	dtypes := map[string]bool{}
	for _, t := range w.Tensors {
		dtypes[t.DType.String()] = true
	}
	log.Info("initialised the weights from model.init_from", "path", src, "tensors", len(w.Tensors), "layout", layout, "dtypes", strings.Join(sortedKeys(dtypes), ","))
	return nil
}

// initFromSource resolves a directory of checkpoints (step-NNNNNNNN/ inside) to its newest that
// verifies, and verifies a checkpoint directory (one with a MANIFEST.json); anything else is
// returned as it is, for model.ReadWeights.
func initFromSource(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return path, nil
	}
	if _, err := os.Stat(filepath.Join(path, FileManifest)); err == nil {
		return path, Verify(path)
	}
	if _, err := os.Stat(filepath.Join(path, model.WeightsFile)); !errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if dirs, _, _ := StepDirs(path); len(dirs) > 0 {
		latest, err := Resume(path, false, slog.Default())
		if err != nil {
			return "", err
		}
		return latest, nil
	}
	return path, nil // model.ReadWeights says what is missing
}

// sameModel compares the architecture of weights that carry a spec with the run's model. A
// ResNet checkpoint of an earlier build carries only its kind (no depth): the tensors' names and
// shapes are all there is to check it by (Params.LoadNamed).
func sameModel(have, want model.Spec) error {
	var diffs []string
	add := func(key string, a, b any) {
		if fmt.Sprint(a) != fmt.Sprint(b) {
			diffs = append(diffs, fmt.Sprintf("%s %v, the run's %v", key, a, b))
		}
	}
	add("kind", have.Kind, want.Kind)
	if have.Kind == model.SpecKindResNet && have.Depth == 0 && len(diffs) == 0 {
		return nil
	}
	add("depth", have.Depth, want.Depth)
	add("stem", have.Stem, want.Stem)
	add("classes", have.Classes, want.Classes)
	add("image", have.Image, want.Image)
	add("layers", have.Layers, want.Layers)
	add("width", have.Width, want.Width)
	add("heads", have.Heads, want.Heads)
	add("context", have.Context, want.Context)
	add("vocab", have.Vocab, want.Vocab)
	add("tied", have.Tied, want.Tied)
	add("widths", have.Widths, want.Widths)
	add("activation", have.Activation, want.Activation)
	if len(diffs) > 0 {
		return fmt.Errorf("the weights are of another model: %s", strings.Join(diffs, "; "))
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
