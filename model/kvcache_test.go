package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The KV-cache decoder against the training code's forward: at every step of a greedy
// generation, its logits equal those of GPT.Forward (evaluation) over the same window, and its
// token is that forward's argmax.

// fullLogits is the reference without a cache: GPT.Forward over tokens (1,T) from position 0,
// then the head on the last position's lnf (logits (V) f32).
func fullLogits(m *GPT, tokens []int32) []float32 {
	dev, T, C := m.dev, len(tokens), m.Cfg.Width
	ids := dev.Alloc(tensor.I32, "ref.tokens", 1, T)
	dev.UploadI32(ids, tokens)
	m.Forward(Inputs{Tokens: ids, Targets: ids, Valid: T}, false)
	logits := dev.Alloc(tensor.F32, "ref.logits", 1, m.Cfg.Vocab)
	dev.MatMul(logits, m.lnf.View((T-1)*C, 1, C), m.headW(), false, true, 1, 0)
	out := tensor.ToHost(logits)
	m.Release()
	freeAll(dev, ids, logits)
	return out
}

// trainFew takes a few AdamW steps on a repeating pattern, so that the logits are peaked (a
// fresh model's are all close to 0, and near-ties are many).
func trainFew(t testing.TB, m *GPT, steps int, rng *rand.Rand) {
	t.Helper()
	dev, T, V := m.dev, m.Cfg.Context, m.Cfg.Vocab
	opt, err := NewAdamW(m.Params(), DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	pattern := make([]int32, 7)
	for i := range pattern {
		pattern[i] = int32(rng.Intn(V))
	}
	const B = 4
	tok, tg := make([]int32, B*T), make([]int32, B*T)
	for i := range tok {
		tok[i] = pattern[i%len(pattern)]
		tg[i] = pattern[(i+1)%len(pattern)]
	}
	tokens, targets := dev.Alloc(tensor.I32, "tokens", B, T), dev.Alloc(tensor.I32, "targets", B, T)
	defer freeAll(dev, tokens, targets)
	dev.UploadI32(tokens, tok)
	dev.UploadI32(targets, tg)
	for s := 0; s < steps; s++ {
		m.Params().ZeroGrad()
		m.Forward(Inputs{Tokens: tokens, Targets: targets, Valid: B * T, Seed: uint64(s)}, true)
		m.Backward(1)
		opt.Step(1e-2)
	}
}

// maxAbsDiff is max|a−b| over max|b| (at least 1e-6).
func maxAbsDiff(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		n = math.Max(n, math.Abs(float64(b[i])))
	}
	return d / math.Max(n, 1e-6)
}

// topGap is the difference between the two largest values.
func topGap(x []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		switch f := float64(v); {
		case f > a:
			a, b = f, a
		case f > b:
			b = f
		}
	}
	return a - b
}

type decoderCase struct {
	name  string
	cfg   GPTConfig
	train int     // AdamW steps before generating
	keep  int     // tokens kept when the window slides
	tol   float64 // on maxAbsDiff of the logits
}

func decoderCases() []decoderCase {
	return []decoderCase{
		{"random", GPTConfig{Layers: 3, Width: 48, Heads: 4, Context: 16, Vocab: 61, Tied: true, Attention: AttnMaterialized}, 0, 16, 1e-4},
		{"trained-untied-flashref", GPTConfig{Layers: 2, Width: 32, Heads: 2, Context: 12, Vocab: 50, Attention: AttnFlash}, 30, 5, 1e-4},
		{"trained-bytes", GPTConfig{Layers: 4, Width: 64, Heads: 4, Context: 24, Vocab: 256, Tied: true, Dropout: 0.1, Checkpoint: 1}, 20, 12, 1e-4},
		{"f16", GPTConfig{Layers: 2, Width: 64, Heads: 8, Context: 16, Vocab: 97, Tied: true, Compute: tensor.F16}, 20, 8, 1e-2},
	}
}

// At every step the cached logits match the full forward over the decoder's window, and the
// greedy token is the reference's argmax (unless the reference's top two are within rounding).
func TestDecoder_logitsMatchFullForward(t *testing.T) {
	for ci, c := range decoderCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			rng := rand.New(rand.NewSource(int64(ci + 1)))
			m, err := NewGPT(dev, c.cfg, uint64(ci+7))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			trainFew(t, m, c.train, rng)
			d := m.NewDecoder()
			defer d.Free()

			maxT := c.cfg.Context
			win := []int32{int32(rng.Intn(c.cfg.Vocab)), int32(rng.Intn(c.cfg.Vocab)), int32(rng.Intn(c.cfg.Vocab))}
			if err := d.Append(win); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, c.cfg.Vocab)
			slides := 0
			for step := 0; step < 2*maxT+5; step++ {
				if d.Len() != len(win) {
					t.Fatalf("step %d: Len %d, window %d", step, d.Len(), len(win))
				}
				dev.Download(got, d.Logits())
				want := fullLogits(m, win)
				if e := maxAbsDiff(got, want); e > c.tol || math.IsNaN(e) {
					t.Fatalf("step %d (window %d): logits differ from the full forward by %.3g (tolerance %g)", step, len(win), e, c.tol)
				}
				next := int32(argmax(got))
				if ref := int32(argmax(want)); ref != next && topGap(want) > 2*c.tol {
					t.Fatalf("step %d: greedy token %d, the full forward's argmax %d", step, next, ref)
				}
				win = append(win, next)
				if len(win) > maxT { // slide: keep the newest c.keep, run them from position 0
					win = append([]int32(nil), win[len(win)-c.keep:]...)
					d.Reset()
					err = d.Append(win)
					slides++
				} else {
					err = d.Append(win[len(win)-1:])
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if slides < 2 {
				t.Fatalf("only %d slides: the test should cross the context", slides)
			}
		})
	}
}

// Generate (greedy, the window sliding by one: nanoGPT's crop) gives the tokens of the reference
// loop that runs the full forward over the last Context tokens each step; Recompute the same.
func TestGenerate_greedyMatchesReference(t *testing.T) {
	for ci, c := range decoderCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			rng := rand.New(rand.NewSource(int64(ci + 100)))
			m, err := NewGPT(dev, c.cfg, uint64(ci+3))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			trainFew(t, m, c.train, rng)
			d := m.NewDecoder()
			defer d.Free()
			maxT, n := c.cfg.Context, c.cfg.Context+9
			prompt := []int32{int32(rng.Intn(c.cfg.Vocab)), int32(rng.Intn(c.cfg.Vocab))}

			var streamed []int32
			res, err := d.Generate(prompt, GenerateOptions{MaxNewTokens: n, SlideKeep: maxT,
				OnToken: func(id int32) error { streamed = append(streamed, id); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tokens) != n || fmt.Sprint(streamed) != fmt.Sprint(res.Tokens) {
				t.Fatalf("%d tokens, streamed %v, returned %v", n, streamed, res.Tokens)
			}
			if res.Slides != n-(maxT-len(prompt))-1 {
				t.Fatalf("%d slides for %d tokens past the context", res.Slides, n-(maxT-len(prompt)))
			}
			seq := append([]int32(nil), prompt...)
			for i, id := range res.Tokens {
				want := fullLogits(m, seq[len(seq)-min(maxT, len(seq)):])
				if ref := int32(argmax(want)); ref != id && topGap(want) > 2*c.tol {
					t.Fatalf("token %d: %d, the reference's argmax %d (tokens %v)", i, id, ref, res.Tokens)
				}
				seq = append(seq, id)
			}
			re, err := d.Generate(prompt, GenerateOptions{MaxNewTokens: n, Recompute: true})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(re.Tokens) != fmt.Sprint(res.Tokens) || re.Slides != 0 {
				t.Fatalf("Recompute: %v (%d slides), cached: %v", re.Tokens, re.Slides, res.Tokens)
			}
		})
	}
}

// A long prompt is cut to its last Context tokens; the default SlideKeep is Context/2.
func TestGenerate_longPromptAndDefaultSlide(t *testing.T) {
	dev := cpu.New()
	cfg := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 10, Vocab: 40, Tied: true}
	m, err := NewGPT(dev, cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	trainFew(t, m, 20, rand.New(rand.NewSource(9)))
	d := m.NewDecoder()
	defer d.Free()
	prompt := make([]int32, 25)
	for i := range prompt {
		prompt[i] = int32(i % cfg.Vocab)
	}
	res, err := d.Generate(prompt, GenerateOptions{MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	// The prompt fills the window: token 1 slides it to the newest 5 (4 of the prompt's and
	// itself), tokens 2-6 fill it again, token 7 slides it, and 8-12 do not fill it.
	if res.Slides != 2 {
		t.Fatalf("%d slides, want 2 (12 tokens from a full window of 10, keeping 5)", res.Slides)
	}
	// The first token comes from the prompt's last 10 tokens.
	want := fullLogits(m, prompt[len(prompt)-cfg.Context:])
	if got := int32(argmax(want)); got != res.Tokens[0] && topGap(want) > 1e-4 {
		t.Fatalf("first token %d, the last window's argmax %d", res.Tokens[0], got)
	}
}

// Append refuses what does not fit and leaves the cache as it was; no step allocates; Free
// returns the device to its baseline.
func TestDecoder_errorsAndMemory(t *testing.T) {
	dev := cpu.New()
	cfg := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 8, Vocab: 30, Tied: true}
	m, err := NewGPT(dev, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	base := dev.Stats().Allocated
	d := m.NewDecoder()
	if err := d.Append(make([]int32, 9)); !errors.Is(err, ErrContextFull) {
		t.Fatalf("9 tokens into a context of 8: %v", err)
	}
	if err := d.Append([]int32{1, 30}); err == nil || d.Len() != 0 {
		t.Fatalf("token 30 of a vocabulary of 30: %v, Len %d", err, d.Len())
	}
	if err := d.Append(nil); err == nil {
		t.Fatal("Append of nothing: no error")
	}
	before := dev.Stats()
	if err := d.Append([]int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := d.Append([]int32{int32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Append([]int32{1}); !errors.Is(err, ErrContextFull) || d.Len() != 8 {
		t.Fatalf("a 9th position: %v, Len %d", err, d.Len())
	}
	if after := dev.Stats(); after.Allocs != before.Allocs || after.Allocated != before.Allocated {
		t.Fatalf("steps allocated: %d → %d allocations, %d → %d bytes", before.Allocs, after.Allocs, before.Allocated, after.Allocated)
	}
	if _, err := d.Generate(nil, GenerateOptions{MaxNewTokens: 1}); err == nil {
		t.Fatal("Generate without a prompt: no error")
	}
	if _, err := d.Generate([]int32{1}, GenerateOptions{MaxNewTokens: 1, SlideKeep: 9}); err == nil {
		t.Fatal("SlideKeep 9 > Context 8: no error")
	}
	if _, err := d.Generate([]int32{1}, GenerateOptions{MaxNewTokens: 1, Vocab: 31}); err == nil {
		t.Fatal("Vocab 31 > the model's 30: no error")
	}
	d.Free()
	if got := dev.Stats().Allocated; got != base {
		t.Fatalf("after Free: %d bytes allocated, %d before NewDecoder", got, base)
	}
}

// Greedy generation on the CPU for a model of configs/opticks-gpt-tiny.yaml's size (4 layers,
// width 128, 4 heads, context 64, 256 byte ids, f32): one prompt token and 63 new ones, which
// fill the context exactly (no slide). cache: the KV cache; recompute: the same decoder re-running
// the whole window per token; forward: the training code's GPT.Forward over the window per token
// (the test's reference, which also runs the head and loss over every position).
func BenchmarkGenerate_opticksTiny(b *testing.B) {
	dev := cpu.New()
	cfg := GPTConfig{Layers: 4, Width: 128, Heads: 4, Context: 64, Vocab: 256, Tied: true}
	m, err := NewGPT(dev, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Free()
	d := m.NewDecoder()
	defer d.Free()
	const newTokens = 63
	prompt := []int32{'T'}
	run := map[string]func(){
		"cache": func() {
			if _, err := d.Generate(prompt, GenerateOptions{MaxNewTokens: newTokens}); err != nil {
				b.Fatal(err)
			}
		},
		"recompute": func() {
			if _, err := d.Generate(prompt, GenerateOptions{MaxNewTokens: newTokens, Recompute: true}); err != nil {
				b.Fatal(err)
			}
		},
		"forward": func() {
			seq := append([]int32(nil), prompt...)
			for i := 0; i < newTokens; i++ {
				seq = append(seq, int32(argmax(fullLogits(m, seq))))
			}
		},
	}
	for _, name := range []string{"cache", "recompute", "forward"} {
		b.Run(name, func(b *testing.B) {
			start := time.Now()
			for i := 0; i < b.N; i++ {
				run[name]()
			}
			b.ReportMetric(float64(newTokens*b.N)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}
