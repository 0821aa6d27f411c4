package model

// weights.go: a model's weights as named tensors, in and out, and the files they live in:
//
//	New(dev, spec, seed)     the one factory: the model of a Spec (spec.go), freshly initialised
//	ReadWeights(path)        the tensors of a safetensors file, a goddp checkpoint or export
//	                         directory, or a Hugging Face model directory, with the spec or
//	                         Hugging Face config found beside them
//	(*Weights).For(spec)     those tensors under goddp's names for spec's model (HF converted)
//	(*Params).LoadNamed(ts)  set the parameters from them: all or nothing
//	Open(dev, path)          all of the above: the model a path holds, ready to run
//
// NewGPT's, NewMLP's and NewResNet's parameter names are the goddp names ("wte",
// "h.3.attn.qkv.w", "fc.0.w", "layer1.0.u0.conv.w").

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/goddp/goddp/model/tensor"
)

// File names in a model directory (goddp checkpoints and exports, Hugging Face models).
const (
	WeightsFile      = "model.safetensors"
	WeightsIndexFile = "model.safetensors.index.json" // Hugging Face's sharded weights
	ConfigFile       = "config.json"
)

// NamedWeights returns the f32 master weights as named tensors (host copies), in registration
// order.
func (ps *Params) NamedWeights() []NamedTensor {
	ps.mustBeWhole("NamedWeights")
	out := make([]NamedTensor, 0, len(ps.List))
	for _, p := range ps.List {
		out = append(out, NamedTensor{Name: p.Name, DType: tensor.F32, Shape: append([]int(nil), p.Shape...), Data: F32Bytes(tensor.ToHost(p.W))})
	}
	return out
}

// LoadNamed sets every parameter from ts (goddp's names; F32, F16 or BF16, widened to f32) and
// refreshes the f16 copy. Every parameter must be in ts with its shape, and every tensor of ts
// must be a parameter; errors name the tensor, and nothing is written unless all are good.
func (ps *Params) LoadNamed(ts []NamedTensor) error {
	if ps.held != nil {
		return fmt.Errorf("model: loading weights into a sharded f32 master (ddp.shard_master): make it whole first (UnshardMaster)")
	}
	want := map[string][]int{}
	for _, p := range ps.List {
		want[p.Name] = p.Shape
	}
	byName, err := checkNamed(ts, want)
	if err != nil {
		return err
	}
	vals := make([][]float32, len(ps.List))
	for i, p := range ps.List {
		if vals[i], err = byName[p.Name].Float32s(); err != nil {
			return err
		}
	}
	for i, p := range ps.List {
		ps.dev.Upload(p.W, vals[i])
	}
	ps.SyncHalf()
	return nil
}

// checkNamed indexes ts by name and checks them against want (name → shape): each name of want
// present once with its shape, nothing else.
func checkNamed(ts []NamedTensor, want map[string][]int) (map[string]NamedTensor, error) {
	by := make(map[string]NamedTensor, len(ts))
	for _, t := range ts {
		shape, ok := want[t.Name]
		if !ok {
			return nil, fmt.Errorf("model: tensor %q is not a parameter of the model", t.Name)
		}
		if _, dup := by[t.Name]; dup {
			return nil, fmt.Errorf("model: tensor %q appears twice", t.Name)
		}
		if fmt.Sprint(t.Shape) != fmt.Sprint(shape) {
			return nil, fmt.Errorf("model: tensor %q has shape %v, the model wants %v", t.Name, t.Shape, shape)
		}
		by[t.Name] = t
	}
	for _, name := range sortedKeys(want) {
		if _, ok := by[name]; !ok {
			return nil, fmt.Errorf("model: no weights for parameter %q", name)
		}
	}
	return by, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// gptShapes are the parameters NewGPT registers for cfg, name → shape, without a device (the
// same constructors on parameters that are never built; weights_test.go checks it against NewGPT).
func gptShapes(cfg GPTConfig) (map[string][]int, error) {
	if cfg.Layers <= 0 || cfg.Width <= 0 || cfg.Heads <= 0 || cfg.Context <= 0 || cfg.Vocab <= 0 || cfg.Width%cfg.Heads != 0 {
		return nil, fmt.Errorf("model: GPT of layers %d, width %d, heads %d, context %d, vocab %d: want positive sizes, heads dividing width",
			cfg.Layers, cfg.Width, cfg.Heads, cfg.Context, cfg.Vocab)
	}
	ps := NewParams(nil)
	NewEmbedding(ps, cfg.Vocab, cfg.Context, cfg.Width, 1)
	for l := 0; l < cfg.Layers; l++ {
		NewBlock(ps, fmt.Sprintf("h.%d", l), cfg.Width, cfg.Heads, 1, 1, 0)
	}
	NewLayerNorm(ps, "lnf", cfg.Width)
	if !cfg.Tied {
		NewLinear(ps, "lm_head", cfg.Width, cfg.Vocab, 1, false)
	}
	out := map[string][]int{}
	for _, p := range ps.List {
		out[p.Name] = p.Shape
	}
	return out, nil
}

// New is the one factory: it builds the model spec describes on dev (a GPT, an MLP or a ResNet),
// computing in spec.Compute with spec's memory options, initialised from seed exactly as NewGPT,
// NewMLP and NewResNet do (the same parameters, in the same order, from the same draws). A spec
// that does not describe a model goddp can build is a one-line error naming the field. Load
// weights into it with Params().LoadNamed, or use Open.
func New(dev tensor.Device, spec Spec, seed uint64) (Model, error) {
	switch spec.Kind {
	case SpecKindGPT:
		cfg, err := spec.GPTConfig()
		if err != nil {
			return nil, err
		}
		return NewGPT(dev, cfg, seed)
	case SpecKindMLP:
		cfg, err := spec.MLPConfig()
		if err != nil {
			return nil, err
		}
		return NewMLP(dev, cfg, seed)
	case SpecKindResNet:
		cfg, err := spec.ResNetConfig()
		if err != nil {
			return nil, err
		}
		return NewResNet(dev, cfg, seed)
	}
	return nil, fmt.Errorf("model: spec kind %q: want %s, %s or %s", spec.Kind, SpecKindGPT, SpecKindMLP, SpecKindResNet)
}

// Weights is what ReadWeights found.
type Weights struct {
	Path    string        // what was read: a file, or the directory
	Tensors []NamedTensor // sorted by name (per file, for sharded weights)
	Meta    map[string]string
	// Spec is goddp's description of the model: from config.json beside the weights (a goddp
	// checkpoint) or the file's __metadata__; nil when there is neither.
	Spec *Spec
	// HF is a Hugging Face config.json beside the weights (model_type gpt2); nil when there is none.
	HF *HFGPT2Config
}

// ReadWeights reads the weights at path: a safetensors file, or a directory holding
// model.safetensors (a goddp checkpoint step directory, a `ddptrain export`, a Hugging Face model
// directory) or Hugging Face's sharded model.safetensors.index.json. config.json beside them is
// read as goddp's Spec ("format": "goddp") or a Hugging Face GPT-2 config ("model_type": "gpt2").
func ReadWeights(path string) (*Weights, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model: weights: %w", err)
	}
	w := &Weights{Path: path}
	dir, files := filepath.Dir(path), []string{path}
	if st.IsDir() {
		dir = path
		if files, err = weightFiles(path); err != nil {
			return nil, err
		}
	}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("model: weights: %w", err)
		}
		ts, meta, err := ParseSafetensors(b)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", f, err)
		}
		w.Tensors = append(w.Tensors, ts...)
		if i == 0 {
			w.Meta = meta
		}
	}
	if st.IsDir() { // config.json belongs to a directory
		if err := w.readConfig(filepath.Join(dir, ConfigFile)); err != nil {
			return nil, err
		}
	} else if IsHFGPT2(w.Tensors) {
		// A lone Hugging Face file: its config.json beside it, when there is one, is the
		// description For checks the model against (issue 30: the head count is in no tensor's
		// shape). A goddp file speaks for itself (__metadata__).
		if err := w.readConfig(filepath.Join(filepath.Dir(path), ConfigFile)); err != nil {
			return nil, err
		}
	}
	if w.Spec == nil {
		s, ok, err := SpecFromMetadata(w.Meta)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", files[0], err)
		}
		if ok {
			w.Spec = &s
		}
	}
	return w, nil
}

// weightFiles lists a model directory's safetensors files: model.safetensors, or the shards that
// model.safetensors.index.json names.
func weightFiles(dir string) ([]string, error) {
	one := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(one); err == nil {
		return []string{one}, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, WeightsIndexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("model: %s has neither %s nor %s (PyTorch .bin weights: convert them to safetensors first)", dir, WeightsFile, WeightsIndexFile)
	}
	if err != nil {
		return nil, fmt.Errorf("model: weights: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("model: %s/%s: no weight_map (%v)", dir, WeightsIndexFile, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range idx.WeightMap {
		if !seen[f] && filepath.Base(f) == f {
			seen[f] = true
			files = append(files, filepath.Join(dir, f))
		} else if filepath.Base(f) != f {
			return nil, fmt.Errorf("model: %s/%s names %q outside the directory", dir, WeightsIndexFile, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

// readConfig reads config.json (if there is one) as goddp's spec or Hugging Face's config.
func (w *Weights) readConfig(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	var probe struct {
		Format    string `json:"format"`
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return fmt.Errorf("model: %s: %w", path, err)
	}
	switch {
	case probe.Format == SpecFormat:
		s, err := ParseSpec(b)
		if err != nil {
			return fmt.Errorf("model: %s: %w", path, err)
		}
		w.Spec = &s
	case probe.ModelType != "":
		c, err := ParseHFGPT2Config(b)
		if err != nil {
			return fmt.Errorf("model: %s: %w", path, err)
		}
		w.HF = &c
	default:
		return fmt.Errorf("model: %s is neither goddp's model config (\"format\": %q) nor a Hugging Face one (\"model_type\")", path, SpecFormat)
	}
	return nil
}

// For returns the weights under goddp's names and layout for spec's model, in f32: Hugging Face
// GPT-2 names are converted (FromHFGPT2, after checking a config.json beside them fits spec),
// goddp's are taken as they are (widened to f32). Shapes are checked when they are loaded
// (Params.LoadNamed).
func (w *Weights) For(spec Spec) ([]NamedTensor, error) {
	if IsHFGPT2(w.Tensors) {
		if spec.Kind != SpecKindGPT {
			return nil, fmt.Errorf("model: %s holds Hugging Face GPT-2 weights, the model is a %s", w.Path, spec.Kind)
		}
		if w.HF == nil {
			// Without a config the head count cannot be checked: a model of other heads would
			// load silently and compute something else.
			return nil, fmt.Errorf("model: %s holds Hugging Face GPT-2 weights with no %s beside them: n_head is in no tensor, "+
				"so the fit to the model (model.heads %d) cannot be checked; put the model's %s beside the file", w.Path, ConfigFile, spec.Heads, ConfigFile)
		}
		if err := w.HF.CheckFits(spec); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, w.Path)
		}
		ts, err := FromHFGPT2(spec, w.Tensors)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, w.Path)
		}
		return ts, nil
	}
	out := make([]NamedTensor, len(w.Tensors))
	for i, t := range w.Tensors {
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, w.Path)
		}
		out[i] = NamedTensor{Name: t.Name, DType: tensor.F32, Shape: t.Shape, Data: F32Bytes(v)}
	}
	return out, nil
}

// ModelSpec is the spec of the model the weights belong to: goddp's spec when they carry one,
// else the Hugging Face config's, else an error.
func (w *Weights) ModelSpec() (Spec, error) {
	switch {
	case w.Spec != nil:
		return *w.Spec, nil
	case w.HF != nil:
		return w.HF.Spec()
	}
	return Spec{}, fmt.Errorf("model: %s carries no model description (no config.json beside it, no model.* __metadata__)", w.Path)
}

// Open builds the model the weights at path belong to (ReadWeights, then ModelSpec) on dev, in
// f32, and loads them (a ResNet's BatchNorm running statistics too): a goddp checkpoint or
// export, or a Hugging Face GPT-2 directory.
func Open(dev tensor.Device, path string) (Model, Spec, error) {
	w, err := ReadWeights(path)
	if err != nil {
		return nil, Spec{}, err
	}
	spec, err := w.ModelSpec()
	if err != nil {
		return nil, Spec{}, err
	}
	ts, err := w.For(spec)
	if err != nil {
		return nil, Spec{}, err
	}
	m, err := New(dev, spec, 0)
	if err != nil {
		return nil, Spec{}, err
	}
	ts, upload, err := bufferValues(m, ts)
	if err == nil {
		err = m.Params().LoadNamed(ts)
	}
	if err != nil {
		m.Free()
		return nil, Spec{}, fmt.Errorf("%w (%s)", err, path)
	}
	upload()
	return m, spec, nil
}

// bufferValues takes a Buffered model's buffers (a ResNet's BatchNorm running statistics, which
// checkpoints save beside the weights) out of ts: it returns the other tensors, and upload, which
// sets the buffers. Every buffer must be in ts with its size; errors name it.
func bufferValues(m Model, ts []NamedTensor) (rest []NamedTensor, upload func(), err error) {
	b, ok := m.(Buffered)
	if !ok || len(b.Buffers().List) == 0 {
		return ts, func() {}, nil
	}
	bufs := b.Buffers()
	byName := map[string]NamedTensor{}
	for _, t := range ts {
		if bufs.Get(t.Name) != nil {
			byName[t.Name] = t
		} else {
			rest = append(rest, t)
		}
	}
	vals := make([][]float32, len(bufs.List))
	for i, x := range bufs.List {
		t, ok := byName[x.Name]
		if !ok {
			return nil, nil, fmt.Errorf("model: no values for buffer %q", x.Name)
		}
		if vals[i], err = t.Float32s(); err != nil {
			return nil, nil, err
		}
		if len(vals[i]) != x.Len {
			return nil, nil, fmt.Errorf("model: buffer %q has %d values, the model wants %d", x.Name, len(vals[i]), x.Len)
		}
	}
	return rest, func() {
		for i, x := range bufs.List {
			bufs.dev.Upload(x.T, vals[i])
		}
	}, nil
}
