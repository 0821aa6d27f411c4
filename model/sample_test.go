package model

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
)

func randLogits(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 2)
	}
	return x
}

func mustSampler(t *testing.T, temp float64, k int, seed uint64) *Sampler {
	t.Helper()
	s, err := NewSampler(temp, k, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Temperature 0 and top-k 1 are the argmax, the lowest id among equal maxima.
func TestSampler_greedy(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 50; i++ {
		x := randLogits(rng, 1+rng.Intn(300))
		want := argmax(x)
		for _, s := range []*Sampler{mustSampler(t, 0, 0, uint64(i)), mustSampler(t, 0, 5, 1), mustSampler(t, 1, 1, uint64(i)), mustSampler(t, 7, 1, 3)} {
			if got := s.Sample(x); got != want {
				t.Fatalf("T %v k %d: %d, argmax %d", s.Temperature, s.TopK, got, want)
			}
		}
	}
	tie := []float32{1, 3, 0, 3, 3}
	if got := mustSampler(t, 0, 0, 0).Sample(tie); got != 1 {
		t.Fatalf("ties: %d, want the lowest id 1", got)
	}
}

// The same seed gives the same draws; another seed others.
func TestSampler_seeded(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	rows := make([][]float32, 200)
	for i := range rows {
		rows[i] = randLogits(rng, 80)
	}
	draw := func(seed uint64, k int) string {
		s := mustSampler(t, 1.3, k, seed)
		out := make([]int, len(rows))
		for i, x := range rows {
			out[i] = s.Sample(x)
		}
		return fmt.Sprint(out)
	}
	for _, k := range []int{0, 10} {
		a, b, c := draw(42, k), draw(42, k), draw(43, k)
		if a != b {
			t.Fatalf("k %d: seed 42 twice gave\n%s\n%s", k, a, b)
		}
		if a == c {
			t.Fatalf("k %d: seeds 42 and 43 gave the same 200 draws", k)
		}
	}
}

// Frequencies follow softmax(logits/T) restricted to the top k.
func TestSampler_distribution(t *testing.T) {
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(3)), float32(math.Log(4)), -1e9}
	const n = 200000
	for _, c := range []struct {
		temp float64
		k    int
		want []float64
	}{
		{1, 0, []float64{.1, .2, .3, .4, 0}},
		{0.5, 0, []float64{1. / 30, 4. / 30, 9. / 30, 16. / 30, 0}},
		{1, 2, []float64{0, 0, 3. / 7, 4. / 7, 0}},
		{1, 3, []float64{0, 2. / 9, 3. / 9, 4. / 9, 0}},
		{1e6, 4, []float64{.25, .25, .25, .25, 0}},
	} {
		s := mustSampler(t, c.temp, c.k, 7)
		count := make([]float64, len(logits))
		for i := 0; i < n; i++ {
			count[s.Sample(logits)]++
		}
		for i := range count {
			// 5 standard deviations of a binomial frequency at p = 0.5 is 0.0056.
			if f := count[i] / n; math.Abs(f-c.want[i]) > 0.006 {
				t.Fatalf("T %v k %d: frequencies %v, want %v", c.temp, c.k, count, c.want)
			}
		}
	}
}

// Top-k keeps the k largest, ties to the lower ids; every draw is among them.
func TestSampler_topK(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 30; i++ {
		x := randLogits(rng, 50+rng.Intn(100))
		if i%3 == 0 {
			for j := range x {
				x[j] = float32(math.Round(float64(x[j]))) // many ties
			}
		}
		k := 1 + rng.Intn(10)
		// The reference: ids ordered by logit, descending, then by id.
		ids := make([]int, len(x))
		for j := range ids {
			ids[j] = j
		}
		for a := 1; a < len(ids); a++ {
			for b := a; b > 0 && (x[ids[b]] > x[ids[b-1]] || x[ids[b]] == x[ids[b-1]] && ids[b] < ids[b-1]); b-- {
				ids[b], ids[b-1] = ids[b-1], ids[b]
			}
		}
		want := map[int]bool{}
		for _, id := range ids[:k] {
			want[id] = true
		}
		s := mustSampler(t, 2, k, uint64(i))
		got := map[int]bool{}
		for _, id := range s.candidates(x) {
			got[id] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("k %d of %v: candidates %v, want %v", k, x, got, want)
		}
		for j := 0; j < 200; j++ {
			if id := s.Sample(x); !want[id] {
				t.Fatalf("k %d: drew %d, not among the top k %v", k, id, want)
			}
		}
	}
}

func TestSampler_badSettings(t *testing.T) {
	for _, c := range []struct {
		temp float64
		k    int
	}{{-1, 0}, {math.NaN(), 0}, {math.Inf(1), 0}, {1, -1}} {
		if _, err := NewSampler(c.temp, c.k, 0); err == nil {
			t.Fatalf("NewSampler(%v, %d): no error", c.temp, c.k)
		}
	}
}

// Through Generate: top-k 1 is greedy, a seed repeats itself, the sampler only picks ids below
// GenerateOptions.Vocab.
func TestGenerate_sampling(t *testing.T) {
	dev := cpu.New()
	cfg := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: true}
	m, err := NewGPT(dev, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	trainFew(t, m, 10, rand.New(rand.NewSource(4)))
	d := m.NewDecoder()
	defer d.Free()
	gen := func(s *Sampler, vocab int) string {
		res, err := d.Generate([]int32{3, 1, 4}, GenerateOptions{MaxNewTokens: 40, Sampler: s, Vocab: vocab})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range res.Tokens {
			if vocab > 0 && int(id) >= vocab {
				t.Fatalf("token %d with Vocab %d", id, vocab)
			}
		}
		return fmt.Sprint(res.Tokens)
	}
	greedy := gen(nil, 0)
	if got := gen(mustSampler(t, 0.8, 1, 9), 0); got != greedy {
		t.Fatalf("top-k 1: %s, greedy %s", got, greedy)
	}
	a, b := gen(mustSampler(t, 1, 0, 5), 0), gen(mustSampler(t, 1, 0, 5), 0)
	if a != b {
		t.Fatalf("seed 5 twice: %s and %s", a, b)
	}
	if c := gen(mustSampler(t, 1, 0, 6), 0); c == a {
		t.Fatalf("seeds 5 and 6 gave the same 40 tokens %s", a)
	}
	gen(mustSampler(t, 3, 0, 1), 10)
}
