package model_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
)

// A Go program's view of a model: build one from a spec, save its weights in Hugging Face
// GPT-2's layout with the config.json transformers reads, open that directory again (Open reads
// the config, converts the names and layout, widens F16/BF16) and compare the logits of a prompt.
func Example() {
	dev := cpu.New()
	spec := model.GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: true}.Spec()
	m, err := model.New(dev, spec, 1) // 1. a model from its spec (GPT-2's init, seed 1)
	if err != nil {
		panic(err)
	}
	defer m.Free()

	// 2. its weights in Hugging Face's layout, as `ddptrain export --format hf` writes them
	dir, _ := os.MkdirTemp("", "example-hf")
	defer os.RemoveAll(dir)
	hf, _ := model.ToHFGPT2(spec, m.Params().NamedWeights())
	var buf bytes.Buffer
	model.WriteSafetensors(&buf, hf, map[string]string{"format": "pt"})
	os.WriteFile(filepath.Join(dir, model.WeightsFile), buf.Bytes(), 0o644)
	hc, _ := spec.HFGPT2Config()
	os.WriteFile(filepath.Join(dir, model.ConfigFile), hc.JSON(), 0o644)

	// 3. open it again: the model the directory describes, weights loaded
	back, backSpec, err := model.Open(dev, dir)
	if err != nil {
		panic(err)
	}
	defer back.Free()

	// 4. logits of a prompt, (B,T,V)
	prompt := []int32{3, 14, 15, 9, 26}
	a, _ := m.(*model.GPT).Logits(prompt, 1, len(prompt))
	b, _ := back.(*model.GPT).Logits(prompt, 1, len(prompt))
	same := len(a) == len(b)
	for i := range a {
		same = same && a[i] == b[i]
	}
	fmt.Printf("layers %d width %d vocab %d\n", backSpec.Layers, backSpec.Width, backSpec.Vocab)
	fmt.Printf("logits %d = 1×%d×%d, identical: %v\n", len(b), len(prompt), backSpec.Vocab, same)
	// Output:
	// layers 2 width 32 vocab 64
	// logits 320 = 1×5×64, identical: true
}
