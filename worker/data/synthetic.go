package data

import "github.com/goddp/goddp/model/tensor"

// SyntheticImages is an image classification set made up on the fly, for benchmarks: sample i is
// a (C,H,W) image of N(0,1) pixels and a label in [0, Classes), both functions of (Seed, i) only,
// so every run and every rank sees the same data without reading a disk. ImageNet's shape is
// NewSyntheticImages(n, 3, 224, 224, 1000, seed).
type SyntheticImages struct {
	N, C, H, W int
	Classes    int
	Seed       uint64
}

// NewSyntheticImages makes a set of n images.
func NewSyntheticImages(n, c, h, w, classes int, seed uint64) *SyntheticImages {
	return &SyntheticImages{N: n, C: c, H: h, W: w, Classes: classes, Seed: seed}
}

func (s *SyntheticImages) Len() int       { return s.N }
func (s *SyntheticImages) Layout() Layout { return Layout{Features: s.C * s.H * s.W, Labels: true} }

// Fill draws the samples idx into b.X and b.Y.
func (s *SyntheticImages) Fill(b *Batch, idx []int) {
	F := s.C * s.H * s.W
	for i, j := range idx {
		seed := tensor.Mix64(s.Seed ^ tensor.Mix64(uint64(j)))
		x := b.X[i*F : (i+1)*F]
		for k := range x {
			x[k] = tensor.Normal(seed, uint64(k))
		}
		b.Y[i] = int32(tensor.Mix64(seed^0x5bd1e995) % uint64(s.Classes))
	}
	b.Size = len(idx)
}

var _ Dataset = (*SyntheticImages)(nil)
