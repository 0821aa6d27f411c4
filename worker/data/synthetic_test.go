package data

import (
	"slices"
	"sync"
	"testing"
)

// fillSynthetic fills one batch of s with the samples idx.
func fillSynthetic(s *SyntheticImages, idx []int) *Batch {
	b := newBatch(s.Layout(), len(idx), HeapAllocator{})
	s.Fill(b, idx)
	return b
}

func TestSyntheticImages_poolIsUnpooledSamplesReused(t *testing.T) {
	const n, P, F = 40, 6, 3 * 5 * 4
	plain := NewSyntheticImages(n, 3, 5, 4, 10, 7)
	pooled := NewSyntheticImages(n, 3, 5, 4, 10, 7).WithPool(P)
	idx := []int{0, 5, 6, 13, 39, 2}
	a, b := fillSynthetic(plain, idx), fillSynthetic(pooled, idx)
	ref := fillSynthetic(plain, []int{0, 5, 0, 1, 3, 2}) // i mod P
	for i, j := range idx {
		got := b.X[i*F : (i+1)*F]
		if !slices.Equal(got, ref.X[i*F:(i+1)*F]) {
			t.Errorf("pooled sample %d: pixels are not those of sample %d (= %d mod %d)", j, j%P, j, P)
		}
		if b.Y[i] != a.Y[i] {
			t.Errorf("pooled sample %d: label %d, unpooled %d (labels are per sample)", j, b.Y[i], a.Y[i])
		}
	}
	if slices.Equal(a.X[2*F:3*F], b.X[2*F:3*F]) {
		t.Error("sample 6 unpooled equals pool image 0: the test cannot tell pooled from plain")
	}
	if pooled.Pool != P || len(pooled.pool) != P*F {
		t.Errorf("pool holds %d floats, want %d images of %d", len(pooled.pool), P, F)
	}
}

func TestSyntheticImages_poolDeterministicBySeed(t *testing.T) {
	idx := []int{3, 1, 4, 1, 5, 9, 2, 6}
	x1 := fillSynthetic(NewSyntheticImages(20, 3, 4, 4, 5, 11).WithPool(4), idx)
	x2 := fillSynthetic(NewSyntheticImages(20, 3, 4, 4, 5, 11).WithPool(4), idx)
	x3 := fillSynthetic(NewSyntheticImages(20, 3, 4, 4, 5, 12).WithPool(4), idx)
	if !slices.Equal(x1.X, x2.X) || !slices.Equal(x1.Y, x2.Y) {
		t.Error("two sets of one seed filled different batches")
	}
	if slices.Equal(x1.X, x3.X) {
		t.Error("seeds 11 and 12 filled the same pixels")
	}
}

// The pool is drawn once whatever the number of concurrent first Fills (go test -race).
func TestSyntheticImages_poolConcurrentFirstFill(t *testing.T) {
	s := NewSyntheticImages(100, 3, 8, 8, 10, 3).WithPool(16)
	var wg sync.WaitGroup
	out := make([]*Batch, 8)
	for w := range out {
		wg.Add(1)
		go func() { defer wg.Done(); out[w] = fillSynthetic(s, []int{w, w + 16, w + 32}) }()
	}
	wg.Wait()
	want := fillSynthetic(NewSyntheticImages(100, 3, 8, 8, 10, 3), []int{0, 1, 2, 3, 4, 5, 6, 7})
	F := 3 * 8 * 8
	for w, b := range out {
		for i := range 3 {
			if !slices.Equal(b.X[i*F:(i+1)*F], want.X[w*F:(w+1)*F]) {
				t.Fatalf("worker %d sample %d: not pool image %d", w, w+16*i, w)
			}
		}
	}
}

// BenchmarkSyntheticImages_fill: one ImageNet-shaped batch of 64, drawn (plain) or copied from
// a pool of 256 (pooled).
func BenchmarkSyntheticImages_fill(b *testing.B) {
	idx := make([]int, 64)
	for i := range idx {
		idx[i] = 1000 + 37*i
	}
	for _, c := range []struct {
		name string
		pool int
	}{{"plain", 0}, {"pooled", 256}} {
		b.Run(c.name, func(b *testing.B) {
			s := NewSyntheticImages(12800, 3, 224, 224, 1000, 1).WithPool(c.pool)
			bt := newBatch(s.Layout(), len(idx), HeapAllocator{})
			s.Fill(bt, idx) // the pool, once
			b.SetBytes(int64(4 * len(bt.X)))
			b.ResetTimer()
			for b.Loop() {
				s.Fill(bt, idx)
			}
		})
	}
}
