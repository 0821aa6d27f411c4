package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Sampler picks a token from a row of logits, on the host:
//
//	Temperature 0:  greedy, the argmax (the lowest id among equal maxima); no random numbers
//	Temperature T:  p ∝ exp(logit/T) over the TopK largest logits (all of them when TopK is 0),
//	                drawn with one uniform number per token from a PCG generator seeded by Seed
//
// A given seed, temperature, top-k and sequence of logits give the same tokens on every run and
// every device (the logits themselves differ between devices by rounding). TopK 1 is greedy.
type Sampler struct {
	Temperature float64
	TopK        int
	rng         *rand.Rand
	heap        []int     // top-k candidates, a min-heap by logit
	w           []float64 // candidate weights
}

// NewSampler checks the settings and seeds the generator.
func NewSampler(temperature float64, topK int, seed uint64) (*Sampler, error) {
	if temperature < 0 || math.IsNaN(temperature) || math.IsInf(temperature, 0) {
		return nil, fmt.Errorf("model: sampling temperature %v: want 0 (greedy) or a positive number", temperature)
	}
	if topK < 0 {
		return nil, fmt.Errorf("model: sampling top-k %d: want 0 (no filtering) or a positive number", topK)
	}
	return &Sampler{Temperature: temperature, TopK: topK, rng: rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))}, nil
}

// Sample returns the chosen id in [0, len(logits)).
func (s *Sampler) Sample(logits []float32) int {
	if s.Temperature == 0 || s.TopK == 1 {
		return argmax(logits)
	}
	cand := s.candidates(logits)
	mx := math.Inf(-1)
	for _, id := range cand {
		mx = max(mx, float64(logits[id]))
	}
	s.w = s.w[:0]
	var sum float64
	for _, id := range cand {
		w := math.Exp((float64(logits[id]) - mx) / s.Temperature)
		s.w = append(s.w, w)
		sum += w
	}
	u := s.rng.Float64() * sum
	for i, w := range s.w {
		if u < w {
			return cand[i]
		}
		u -= w
	}
	return cand[len(cand)-1] // u ran past the sum by rounding
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// candidates is every id when TopK is 0 or covers the vocabulary, else the TopK ids of largest
// logits (of equal logits the lower ids), in no particular order: a heap of TopK, O(V log K).
func (s *Sampler) candidates(logits []float32) []int {
	k := s.TopK
	if k == 0 || k >= len(logits) {
		s.heap = s.heap[:0]
		for i := range logits {
			s.heap = append(s.heap, i)
		}
		return s.heap
	}
	h := s.heap[:0]
	// The root is the worst candidate: the lowest logit, of equal ones the highest id.
	less := func(i, j int) bool {
		a, b := logits[h[i]], logits[h[j]]
		return a < b || a == b && h[i] > h[j]
	}
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && less(c+1, c) {
				c++
			}
			if !less(c, i) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for id, v := range logits {
		switch {
		case len(h) < k:
			h = append(h, id)
			for i := len(h) - 1; i > 0 && less(i, (i-1)/2); i = (i - 1) / 2 { // sift up
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
		case v > logits[h[0]]: // strictly: an equal logit comes later, so it has the higher id
			h[0] = id
			down(0)
		}
	}
	s.heap = h
	return h
}

// GenerateOptions are Decoder.Generate's settings.
type GenerateOptions struct {
	MaxNewTokens int
	Sampler      *Sampler // nil: greedy
	// Vocab limits the ids the sampler may pick to [0, Vocab): a vocabulary padded past the
	// tokenizer's (llm.c pads GPT-2's 50257 to 50304) sets the tokenizer's. 0: the model's.
	Vocab int
	// SlideKeep is how many of the newest tokens stay when the sequence reaches the model's
	// Context: the window drops the older ones and is run again from position 0 (learned
	// positions make the cached keys and values depend on where a token sat, so they are
	// recomputed for the shifted window, in one batched step), then decoding goes on token by
	// token. 0 means Context/2: a re-run every Context/2 tokens. Context slides by one token
	// every step, a full window recompute per token (nanoGPT's crop: the most context, the most
	// compute).
	SlideKeep int
	// Recompute runs without the cache: every token re-runs the whole window (what generation
	// costs without a KV cache; benchmarks compare it).
	Recompute bool
	// OnToken, if set, is called with each new token as it is chosen; an error stops generation
	// and is returned.
	OnToken func(id int32) error
}

// GenerateResult is what Generate made.
type GenerateResult struct {
	Tokens []int32 // the new tokens, without the prompt
	Slides int     // times the window slid (SlideKeep)
}

// Generate continues prompt by MaxNewTokens tokens. The prompt is run as one chunk (its last
// Context tokens when it is longer); each chosen token is appended to the cache, and when the
// sequence reaches the model's Context the window slides (SlideKeep). The cache is reset first.
func (d *Decoder) Generate(prompt []int32, o GenerateOptions) (GenerateResult, error) {
	var res GenerateResult
	cfg := d.m.Cfg
	maxT := cfg.Context
	if len(prompt) == 0 {
		return res, errors.New("model: Generate needs a prompt of at least one token")
	}
	if o.MaxNewTokens < 0 {
		return res, fmt.Errorf("model: Generate: MaxNewTokens = %d", o.MaxNewTokens)
	}
	vocab := o.Vocab
	if vocab == 0 {
		vocab = cfg.Vocab
	}
	if vocab < 0 || vocab > cfg.Vocab {
		return res, fmt.Errorf("model: Generate: Vocab = %d, the model has %d", o.Vocab, cfg.Vocab)
	}
	keep := o.SlideKeep
	if keep == 0 {
		keep = max(maxT/2, 1)
	}
	if keep < 1 || keep > maxT {
		return res, fmt.Errorf("model: Generate: SlideKeep = %d: want 1 … Context (%d), or 0 for Context/2", o.SlideKeep, maxT)
	}
	smp := o.Sampler
	if smp == nil {
		smp = &Sampler{}
	}

	seq := append([]int32(nil), prompt...) // everything so far; the window is a suffix
	window := func(n int) []int32 { return seq[len(seq)-min(n, len(seq)):] }
	d.Reset()
	if err := d.Append(window(maxT)); err != nil {
		return res, err
	}
	logits := make([]float32, cfg.Vocab)
	for i := 0; i < o.MaxNewTokens; i++ {
		d.m.dev.Download(logits, d.Logits())
		id := int32(smp.Sample(logits[:vocab]))
		seq = append(seq, id)
		res.Tokens = append(res.Tokens, id)
		if o.OnToken != nil {
			if err := o.OnToken(id); err != nil {
				return res, err
			}
		}
		if i == o.MaxNewTokens-1 {
			break // the last token's logits are not needed
		}
		var err error
		switch {
		case o.Recompute:
			d.Reset()
			err = d.Append(window(maxT))
		case d.Len() == maxT:
			res.Slides++
			d.Reset()
			err = d.Append(window(keep))
		default:
			err = d.Append(seq[len(seq)-1:])
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}
