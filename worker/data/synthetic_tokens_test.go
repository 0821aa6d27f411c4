package data

import (
	"strings"
	"testing"
)

// Synthetic token windows: a function of (seed, index) only, in range, the targets the inputs
// shifted by one, spread over the vocabulary, and another seed another set.
func TestSyntheticTokens(t *testing.T) {
	const T, V = 64, 50257
	s, err := NewSyntheticTokens(1000, T, V, 7)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1000 || s.Layout() != (Layout{SeqLen: T}) {
		t.Fatalf("Len %d Layout %+v", s.Len(), s.Layout())
	}
	fill := func(s *SyntheticTokens, idx []int) *Batch {
		b := &Batch{Tokens: make([]int32, len(idx)*T), Targets: make([]int32, len(idx)*T)}
		s.Fill(b, idx)
		return b
	}
	a, b := fill(s, []int{3, 999, 0}), fill(s, []int{0, 3})
	if a.Size != 3 || a.T != T {
		t.Fatalf("Size %d T %d", a.Size, a.T)
	}
	for k := 0; k < T; k++ { // window 3 is a's first and b's second; window 0 a's third, b's first
		if a.Tokens[k] != b.Tokens[T+k] || a.Tokens[2*T+k] != b.Tokens[k] || a.Targets[k] != b.Targets[T+k] {
			t.Fatalf("position %d: a window's tokens depend on the batch it is in", k)
		}
	}
	seen := map[int32]bool{}
	for i := 0; i < 3; i++ {
		w, g := a.Tokens[i*T:(i+1)*T], a.Targets[i*T:(i+1)*T]
		for k := 0; k < T; k++ {
			if w[k] < 0 || w[k] >= V || g[k] < 0 || g[k] >= V {
				t.Fatalf("window %d position %d: %d → %d out of [0, %d)", i, k, w[k], g[k], V)
			}
			if k+1 < T && g[k] != w[k+1] {
				t.Fatalf("window %d: target %d is %d, the next input %d", i, k, g[k], w[k+1])
			}
			seen[w[k]] = true
		}
	}
	if len(seen) < 3*T*9/10 { // 192 draws from 50257 ids: nearly all distinct
		t.Errorf("%d distinct ids in %d draws", len(seen), 3*T)
	}
	o, _ := NewSyntheticTokens(1000, T, V, 8)
	c := fill(o, []int{3})
	same := 0
	for k := 0; k < T; k++ {
		if c.Tokens[k] == a.Tokens[k] {
			same++
		}
	}
	if same > T/8 {
		t.Errorf("seeds 7 and 8 agree on %d of %d tokens", same, T)
	}
	for _, bad := range [][3]int{{0, T, V}, {10, 0, V}, {10, T, 1}} {
		if _, err := NewSyntheticTokens(bad[0], bad[1], bad[2], 1); err == nil || !strings.Contains(err.Error(), "synthetic tokens") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
