package data

import "testing"

// RandomCrop shifts each image by at most pad pixels, fills the uncovered border with zeros,
// keeps the labels, and draws the same offsets for the same (seed, epoch, index).
func TestRandomCrop_shiftsWithinPadDeterministically(t *testing.T) {
	const n, h, w = 64, 6, 5
	src := &Classification{N: n, Features: h * w, Rows: h, Cols: w, Classes: 3, X: make([]float32, n*h*w), Y: make([]int32, n)}
	for i := range src.X {
		src.X[i] = float32(i%(h*w) + 1) // pixel value = its position + 1, never 0
	}
	for i := range src.Y {
		src.Y[i] = int32(i % 3)
	}
	ds := RandomCrop(src, 1, h, w, 2, 7)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	fill := func(epoch int) *Batch {
		b := newBatch(ds.Layout(), n, HeapAllocator{})
		b.Epoch = epoch
		ds.Fill(b, idx)
		return b
	}
	a, a2, c := fill(0), fill(0), fill(1)
	moved, differ := 0, 0
	for i := 0; i < n; i++ {
		img := a.X[i*h*w : (i+1)*h*w]
		// find the shift from a pixel that is present: value v at (y,x) came from position v-1
		dy, dx, found := 0, 0, false
		for p, v := range img {
			if v != 0 {
				q := int(v) - 1
				dy, dx, found = q/w-p/w, q%w-p%w, true
				break
			}
		}
		if !found || dy < -2 || dy > 2 || dx < -2 || dx > 2 {
			t.Fatalf("image %d: shift (%d,%d) found %v", i, dy, dx, found)
		}
		for p, v := range img {
			sy, sx := p/w+dy, p%w+dx
			want := float32(0)
			if sy >= 0 && sy < h && sx >= 0 && sx < w {
				want = float32(sy*w + sx + 1)
			}
			if v != want {
				t.Fatalf("image %d shift (%d,%d): pixel %d is %v, want %v", i, dy, dx, p, v, want)
			}
		}
		if dy != 0 || dx != 0 {
			moved++
		}
		if a.Y[i] != src.Y[i] {
			t.Fatalf("label %d changed", i)
		}
		for p := range img {
			if a2.X[i*h*w+p] != img[p] {
				t.Fatalf("image %d differs between two fills of the same epoch", i)
			}
			if c.X[i*h*w+p] != img[p] {
				differ++
				break
			}
		}
	}
	if moved < n/2 || differ < n/2 {
		t.Fatalf("%d of %d images moved, %d differ between epochs", moved, n, differ)
	}
}
