package data

import (
	"runtime"
	"sync"

	"github.com/goddp/goddp/model/tensor"
)

// SyntheticImages is an image classification set made up on the fly, for benchmarks: sample i is
// a (C,H,W) image of N(0,1) pixels and a label in [0, Classes), both functions of (Seed, i) only,
// so every run and every rank sees the same data without reading a disk. ImageNet's shape is
// NewSyntheticImages(n, 3, 224, 224, 1000, seed).
//
// Drawing the pixels costs ~40 ns each (four hashes, a log, a sqrt and a cos): a 3×224×224 image
// is ~6 ms of one core, a batch of 64 ~0.4 s, which the loader's few workers cannot hide behind a
// GPU step of ~30 ms. With Pool = P (0 < P < N, WithPool) only P distinct images are drawn, once,
// on the first Fill (in parallel), and sample i's pixels are those of sample i mod P: Fill is then
// a copy (~0.6 MB per 224² image). Labels stay a function of (Seed, i) for every i, and the
// pool's images are the unpooled set's samples 0..P-1, bit for bit.
type SyntheticImages struct {
	N, C, H, W int
	Classes    int
	Seed       uint64
	Pool       int // distinct images; 0 or >= N: every sample drawn in Fill

	once sync.Once
	pool []float32 // (Pool, C*H*W), drawn by the first Fill
}

// NewSyntheticImages makes a set of n images, each drawn when filled.
func NewSyntheticImages(n, c, h, w, classes int, seed uint64) *SyntheticImages {
	return &SyntheticImages{N: n, C: c, H: h, W: w, Classes: classes, Seed: seed}
}

// WithPool makes s reuse p distinct images (see SyntheticImages) and returns it; p <= 0 or
// p >= N leaves every sample drawn in Fill.
func (s *SyntheticImages) WithPool(p int) *SyntheticImages {
	s.Pool = p
	return s
}

func (s *SyntheticImages) Len() int       { return s.N }
func (s *SyntheticImages) Layout() Layout { return Layout{Features: s.C * s.H * s.W, Labels: true} }

// pooled says whether s reuses a pool of images.
func (s *SyntheticImages) pooled() bool { return s.Pool > 0 && s.Pool < s.N }

// sampleSeed is sample j's stream.
func (s *SyntheticImages) sampleSeed(j int) uint64 {
	return tensor.Mix64(s.Seed ^ tensor.Mix64(uint64(j)))
}

// draw writes sample j's pixels into x (C*H*W).
func (s *SyntheticImages) draw(x []float32, j int) {
	seed := s.sampleSeed(j)
	for k := range x {
		x[k] = tensor.Normal(seed, uint64(k))
	}
}

// drawPool draws the pool's images, split over the host's cores.
func (s *SyntheticImages) drawPool() {
	F := s.C * s.H * s.W
	s.pool = make([]float32, s.Pool*F)
	var wg sync.WaitGroup
	n := min(runtime.GOMAXPROCS(0), s.Pool)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := w; p < s.Pool; p += n {
				s.draw(s.pool[p*F:(p+1)*F], p)
			}
		}()
	}
	wg.Wait()
}

// Fill draws the samples idx into b.X and b.Y (copies them from the pool when pooled).
func (s *SyntheticImages) Fill(b *Batch, idx []int) {
	F := s.C * s.H * s.W
	if s.pooled() {
		s.once.Do(s.drawPool)
	}
	for i, j := range idx {
		x := b.X[i*F : (i+1)*F]
		if s.pooled() {
			p := j % s.Pool
			copy(x, s.pool[p*F:(p+1)*F])
		} else {
			s.draw(x, j)
		}
		b.Y[i] = int32(tensor.Mix64(s.sampleSeed(j)^0x5bd1e995) % uint64(s.Classes))
	}
	b.Size = len(idx)
}

var _ Dataset = (*SyntheticImages)(nil)
