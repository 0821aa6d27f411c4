package main

// sample.go: `ddptrain sample`, text from a trained GPT.
//
//	ddptrain sample --checkpoint DIR [--config FILE] --prompt TEXT --max-new-tokens N
//	                [--temperature T --top-k K --seed S] [--slide-keep N] [--json] [--device cpu|cuda]
//
// DIR is a checkpoint (step-NNNNNNNN/, with MANIFEST.json) or a checkpoint.dir, whose newest
// checkpoint that verifies is taken, or a Hugging Face GPT-2 directory (config.json and
// model.safetensors: a download, or ddptrain export --format hf). The model's shape comes from a config.json in the checkpoint
// (or in DIR) when there is one, else from --config, the run's YAML; both given must agree.
// Text is GPT-2's BPE for vocabularies of 50257 ids or more (ids past 50257 are padding and never
// sampled; an empty prompt starts from <|endoftext|>), else bytes (ids < 256). Generation runs
// with the model's KV cache (model.Decoder) in f32; at the model's context the window slides,
// keeping the newest --slide-keep tokens (default context/2), which are run again from position 0.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/checkpoint"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
)

// sampleOutput is what --json prints.
type sampleOutput struct {
	Checkpoint   string  `json:"checkpoint"`
	Step         int     `json:"step"`
	Tokenizer    string  `json:"tokenizer"`
	Prompt       string  `json:"prompt"`
	PromptIDs    []int32 `json:"prompt_ids"`
	GeneratedIDs []int32 `json:"generated_ids"`
	Completion   string  `json:"completion"` // the generated tokens' text (JSON: invalid UTF-8 bytes become U+FFFD; the ids are exact)
	Text         string  `json:"text"`       // prompt + completion
	Temperature  float64 `json:"temperature"`
	TopK         int     `json:"top_k"`
	Seed         uint64  `json:"seed"`
	Slides       int     `json:"slides"`
	Seconds      float64 `json:"seconds"` // generation, the prompt's forward included
}

func init() {
	register("sample", subcommand{summary: "generate text from a checkpoint (KV cache; greedy at --temperature 0)", run: func(args []string) int { return runSample(args, os.Stdout, os.Stderr) }})
}

func runSample(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("ddptrain sample", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stderr)
	ckpt := fs.String("checkpoint", "", "checkpoint directory (step-N/), a checkpoint.dir (its newest checkpoint), or a Hugging Face GPT-2 directory")
	configPath := fs.String("config", "", "the run's YAML config, for a checkpoint without config.json")
	prompt := fs.String("prompt", "", "text to continue")
	maxNew := fs.Int("max-new-tokens", 128, "tokens to generate")
	temp := fs.Float64("temperature", 1, "softmax temperature; 0 is greedy (argmax)")
	topK := fs.Int("top-k", 0, "sample among the K most likely tokens only (0: all)")
	seed := fs.Uint64("seed", 1, "seed of the sampler's random numbers (same seed, same text)")
	keep := fs.Int("slide-keep", 0, "tokens kept when the sequence reaches the context (0: context/2; context: slide by one)")
	asJSON := fs.Bool("json", false, "print the token ids and text as one JSON object")
	device := fs.String("device", "auto", "device: auto, cpu, or cuda (make cuda)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ddptrain sample --checkpoint DIR [--config FILE] --prompt TEXT [flags]\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "ddptrain sample:", err)
		return exitUsage
	}
	if *ckpt == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	smp, err := model.NewSampler(*temp, *topK, *seed)
	if err == nil && *maxNew < 0 {
		err = fmt.Errorf("--max-new-tokens %d: want ≥ 0", *maxNew)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ddptrain sample:", err)
		return exitUsage
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "ddptrain sample:", err)
		return exitFailed
	}

	dev, err := worker.OpenDevice(*device, 0)
	if err != nil {
		return fail(err)
	}
	m, src, err := loadModelForSampling(dev, *ckpt, *configPath)
	if err != nil {
		return fail(err)
	}
	defer m.Free()
	tok, err := tokenizerFor(m.Cfg.Vocab)
	if err != nil {
		return fail(err)
	}
	ids, err := tok.encode(*prompt)
	if err != nil {
		return fail(err)
	}

	d := m.NewDecoder()
	defer d.Free()
	opts := model.GenerateOptions{MaxNewTokens: *maxNew, Sampler: smp, Vocab: tok.vocab, SlideKeep: *keep}
	if !*asJSON {
		fmt.Fprint(stdout, *prompt)
		opts.OnToken = func(id int32) error {
			_, err := io.WriteString(stdout, tok.decode([]int32{id}))
			return err
		}
	}
	start := time.Now()
	res, err := d.Generate(ids, opts)
	secs := time.Since(start).Seconds()
	if err != nil {
		return fail(err)
	}
	if !*asJSON {
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "ddptrain sample: %s (step %d, %s, %s): %d prompt + %d new tokens in %.2fs (%.0f tokens/s), window slid %d times\n",
			src.path, src.step, src.config, dev.Name(), len(ids), len(res.Tokens), secs, float64(len(res.Tokens))/secs, res.Slides)
		return 0
	}
	completion := tok.decode(res.Tokens)
	out := sampleOutput{Checkpoint: src.path, Step: src.step, Tokenizer: tok.name, Prompt: *prompt, PromptIDs: ids,
		GeneratedIDs: res.Tokens, Completion: completion, Text: *prompt + completion, Temperature: *temp, TopK: *topK,
		Seed: *seed, Slides: res.Slides, Seconds: secs}
	if out.GeneratedIDs == nil {
		out.GeneratedIDs = []int32{}
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return fail(err)
	}
	return 0
}

// sampleSource says where the model came from.
type sampleSource struct {
	path   string // the checkpoint directory loaded
	step   int
	config string // where its shape came from: "config.json" or the --config path
}

// openHFForSampling opens a Hugging Face GPT-2 directory (config.json and model.safetensors, a
// download or `ddptrain export --format hf`) as the GPT to sample from, in f32.
func openHFForSampling(dev tensor.Device, dir string) (*model.GPT, sampleSource, error) {
	src := sampleSource{path: dir, config: "config.json (Hugging Face)"}
	m, _, err := model.Open(dev, dir)
	if err != nil {
		return nil, src, err
	}
	g, ok := m.(*model.GPT)
	if !ok {
		m.Free()
		return nil, src, fmt.Errorf("%s: a %T, not a GPT: nothing to sample", dir, m)
	}
	return g, src, nil
}

// loadModelForSampling builds the GPT of the checkpoint at dir (a step directory, or a
// checkpoint.dir whose newest good checkpoint is taken) on dev, in f32, and loads its weights.
// The shape is the checkpoint's config.json when it has one (samplingConfigJSON), else the run's
// YAML at configPath; given both, they must agree. Every parameter must be in the checkpoint with
// its shape, and the checkpoint may hold no other weights (an untied head, say).
func loadModelForSampling(dev tensor.Device, dir, configPath string) (*model.GPT, sampleSource, error) {
	var src sampleSource
	path := dir
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST.json")); err != nil {
		latest, err := checkpoint.Latest(dir)
		if err != nil {
			return nil, src, err
		}
		if latest == "" {
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil && configPath == "" {
				return openHFForSampling(dev, dir)
			}
			return nil, src, fmt.Errorf("%s: not a checkpoint (no MANIFEST.json), no checkpoint in it that verifies, and no Hugging Face config.json", dir)
		}
		path = latest
	}
	src.path = path

	var cfg, yamlCfg *model.GPTConfig
	for _, p := range []string{filepath.Join(path, "config.json"), filepath.Join(dir, "config.json")} {
		c, err := samplingConfigJSON(p)
		if err != nil {
			return nil, src, err
		}
		if c != nil {
			cfg, src.config = c, p
			break
		}
	}
	if configPath != "" {
		c, err := config.Load(configPath, nil)
		if err != nil {
			return nil, src, err
		}
		spec, err := worker.ModelSpec(c)
		if err != nil {
			return nil, src, err
		}
		if spec.Classifier() {
			return nil, src, fmt.Errorf("%s: model.kind is %q, a classifier: sampling needs a gpt", configPath, spec.Kind)
		}
		yamlCfg = &model.GPTConfig{Layers: spec.Layers, Width: spec.Width, Heads: spec.Heads, Context: spec.Context, Vocab: spec.Vocab, Tied: spec.Tied}
	}
	switch {
	case cfg == nil && yamlCfg == nil:
		return nil, src, fmt.Errorf("%s has no config.json: pass --config FILE, the YAML the run was trained with", path)
	case cfg == nil:
		cfg, src.config = yamlCfg, configPath
	case yamlCfg != nil && *yamlCfg != *cfg:
		return nil, src, fmt.Errorf("--config %s describes %s, but %s says %s", configPath, gptShape(*yamlCfg), src.config, gptShape(*cfg))
	}

	ck, err := checkpoint.Load(path)
	if err != nil {
		return nil, src, err
	}
	src.step = ck.Step
	m, err := model.NewGPT(dev, *cfg, 0)
	if err != nil {
		return nil, src, err
	}
	if err := checkpoint.LoadWeights(ck, m.Params(), nil); err != nil {
		m.Free()
		return nil, src, fmt.Errorf("%s (model %s from %s): %w", path, gptShape(*cfg), src.config, err)
	}
	return m, src, nil
}

func gptShape(c model.GPTConfig) string {
	return fmt.Sprintf("gpt layers %d width %d heads %d context %d vocab %d tied %v", c.Layers, c.Width, c.Heads, c.Context, c.Vocab, c.Tied)
}

// modelFieldsJSON are the model fields a config.json may carry: goddp's names (the YAML's model
// section), at the top level or under "model", or Hugging Face GPT-2's.
type modelFieldsJSON struct {
	Layers  *int  `json:"layers"`
	Width   *int  `json:"width"`
	Heads   *int  `json:"heads"`
	Context *int  `json:"context"`
	Vocab   *int  `json:"vocab"`
	Tied    *bool `json:"tied"`

	NLayer     *int  `json:"n_layer"`
	NEmbd      *int  `json:"n_embd"`
	NHead      *int  `json:"n_head"`
	NPositions *int  `json:"n_positions"`
	NCtx       *int  `json:"n_ctx"`
	VocabSize  *int  `json:"vocab_size"`
	TieWords   *bool `json:"tie_word_embeddings"`

	Model *modelFieldsJSON `json:"model"`
}

// samplingConfigJSON reads the model's shape from the config.json at path: nil, nil when there
// is no such file; an error when it is not JSON or lacks one of the sizes.
func samplingConfigJSON(path string) (*model.GPTConfig, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f modelFieldsJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Model != nil {
		f = *f.Model
	}
	first := func(ps ...*int) int {
		for _, p := range ps {
			if p != nil {
				return *p
			}
		}
		return 0
	}
	c := model.GPTConfig{Layers: first(f.Layers, f.NLayer), Width: first(f.Width, f.NEmbd), Heads: first(f.Heads, f.NHead),
		Context: first(f.Context, f.NPositions, f.NCtx), Vocab: first(f.Vocab, f.VocabSize), Tied: true}
	for _, t := range []*bool{f.Tied, f.TieWords} {
		if t != nil {
			c.Tied = *t
			break
		}
	}
	if c.Layers == 0 || c.Width == 0 || c.Heads == 0 || c.Context == 0 || c.Vocab == 0 {
		return nil, fmt.Errorf("%s: want the model's layers, width, heads, context and vocab (or n_layer, n_embd, n_head, n_positions, vocab_size); read %s", path, gptShape(c))
	}
	return &c, nil
}

// sampleTokenizer turns text into ids and back for a vocabulary.
type sampleTokenizer struct {
	name   string
	vocab  int // the ids it makes and reads: [0, vocab)
	encode func(string) ([]int32, error)
	decode func([]int32) string
}

// gpt2Vocab is GPT-2's BPE vocabulary, <|endoftext|> last.
const gpt2Vocab = 50257

// tokenizerFor is GPT-2's BPE for a vocabulary of 50257 ids or more, else bytes (ids < 256, and
// below the vocabulary).
func tokenizerFor(vocab int) (*sampleTokenizer, error) {
	if vocab >= gpt2Vocab {
		enc, err := data.NewEncoder("gpt2")
		if err != nil {
			return nil, err
		}
		eot := int32(enc.EOT())
		return &sampleTokenizer{name: "gpt2", vocab: enc.Vocab(),
			encode: func(s string) ([]int32, error) {
				if s == "" { // GPT-2's start of an unconditional sample
					return []int32{eot}, nil
				}
				ids, err := enc.Encode(s)
				out := make([]int32, len(ids))
				for i, id := range ids {
					out[i] = int32(id)
				}
				return out, err
			},
			decode: func(ids []int32) string {
				var s []byte
				for _, id := range ids {
					if id == eot { // a special token: not in the BPE's table
						s = append(s, "<|endoftext|>"...)
						continue
					}
					piece, err := enc.Decode([]int{int(id)})
					if err != nil {
						piece = fmt.Sprintf("<|%d|>", id)
					}
					s = append(s, piece...)
				}
				return string(s)
			}}, nil
	}
	n := min(vocab, 256)
	return &sampleTokenizer{name: "bytes", vocab: n,
		encode: func(s string) ([]int32, error) {
			if s == "" {
				return nil, errors.New("--prompt is empty: a byte-level model has no start-of-text token to begin from")
			}
			out := make([]int32, len(s))
			for i := 0; i < len(s); i++ {
				if int(s[i]) >= n {
					return nil, fmt.Errorf("--prompt byte %d (0x%02x at %d) is outside the model's vocabulary of %d", s[i], s[i], i, vocab)
				}
				out[i] = int32(s[i])
			}
			return out, nil
		},
		decode: func(ids []int32) string {
			b := make([]byte, len(ids))
			for i, id := range ids {
				b[i] = byte(id)
			}
			return string(b)
		}}, nil
}
