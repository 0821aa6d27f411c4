package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// StatReducer carries SyncBatchNorm's statistics between the processes of a data-parallel run
// (PyTorch's SyncBatchNorm process group). model knows nothing of other processes: the worker
// implements it over a process group of its own (one that no other collective uses at the same
// time: DDP's gradient all-reduce overlaps the backward) and sets it on the BN layers
// (SetStatReducer) when model.sync_batchnorm is on and the world is larger than one.
type StatReducer interface {
	Rank() int // this process, 0..Size()−1
	Size() int // processes
	// AllReduceSum replaces buf with its element-wise sum over every process (f32). Every
	// process calls it in the same order with the same length.
	AllReduceSum(buf []float32) error
}

// BatchNormed is the optional Model ability of a model with BatchNorm layers (the ResNet).
type BatchNormed interface {
	BatchNorms() []*BatchNorm2d
}

// SetStatReducer makes every BatchNorm of m synchronised over r (nil: statistics per process
// again). It reports whether m has BatchNorm layers.
func SetStatReducer(m Model, r StatReducer) bool {
	bn, ok := m.(BatchNormed)
	if !ok {
		return false
	}
	for _, l := range bn.BatchNorms() {
		l.Sync = r
	}
	return true
}

// SyncErr returns, and clears, the first failure of any of m's BatchNorm layers to reduce its
// statistics (nil when none failed or m has no BatchNorm). A layer whose reduction failed went
// on with its own statistics, so the step that saw the failure must not be applied: the worker
// checks this after every backward.
func SyncErr(m Model) error {
	bn, ok := m.(BatchNormed)
	if !ok {
		return nil
	}
	var first error
	for _, l := range bn.BatchNorms() {
		if l.syncErr != nil && first == nil {
			first = l.syncErr
		}
		l.syncErr = nil
	}
	return first
}

// syncForward is the training forward of a synchronised BatchNorm (PyTorch's
// SyncBatchNorm.forward): local per-channel mean and biased variance with the local count;
// gathered from every process in one collective (each process writes its slot of a
// Size()·(2C+1) buffer, zeros elsewhere, and the sum is the gather: adding zeros is exact); the
// global mean and variance combined in f64 in rank order (Chan et al.), so every process computes
// bit-identical statistics, and with them the same running statistics (unbiased variance, as
// PyTorch); then y normalised with the global statistics. mean and rstd get the global ones for
// the backward.
func (l *BatchNorm2d) syncForward(y, mean, rstd, x *tensor.Tensor, update bool) {
	dev := x.Device()
	sb, err := tensor.AsSyncBatchNorm(dev)
	if err != nil {
		panic("model: " + err.Error())
	}
	C := l.C
	shape := x.Shape()
	count := x.Len() / C
	sb.BatchNormStats(l.Layout, mean, rstd, x) // rstd holds the local variance for now
	W, rank := l.Sync.Size(), l.Sync.Rank()
	n := 2*C + 1
	if cap(l.gather) < W*n {
		l.gather = make([]float32, W*n)
	}
	buf := l.gather[:W*n]
	clear(buf)
	slot := buf[rank*n : (rank+1)*n]
	slot[0] = float32(count)
	dev.Download(slot[1:1+C], mean)
	dev.Download(slot[1+C:], rstd)
	if err := l.Sync.AllReduceSum(buf); err != nil {
		if l.syncErr == nil {
			l.syncErr = fmt.Errorf("model: SyncBatchNorm (%d channels, batch %d): %w", C, shape[0], err)
		}
		// Go on with the local statistics (the step is refused by the worker: SyncErr).
		clear(buf)
		slot[0] = float32(count)
		dev.Download(slot[1:1+C], mean)
		dev.Download(slot[1+C:], rstd)
	}
	gm, gv := make([]float32, C), make([]float32, C)
	rs := make([]float32, C)
	var total float64
	for r := 0; r < W; r++ {
		total += float64(buf[r*n])
	}
	l.count = int(total)
	var rm, rv []float32
	if update {
		rm, rv = make([]float32, C), make([]float32, C)
		dev.Download(rm, l.RunMean)
		dev.Download(rv, l.RunVar)
	}
	for ch := 0; ch < C; ch++ {
		var mu float64
		for r := 0; r < W; r++ {
			s := buf[r*n:]
			mu += float64(s[0]) * float64(s[1+ch])
		}
		mu /= total
		var m2 float64
		for r := 0; r < W; r++ {
			s := buf[r*n:]
			d := float64(s[1+ch]) - mu
			m2 += float64(s[0]) * (float64(s[1+C+ch]) + d*d)
		}
		vr := m2 / total
		gm[ch], gv[ch] = float32(mu), float32(vr)
		rs[ch] = float32(1 / math.Sqrt(vr+float64(l.Eps)))
		if update {
			unb := vr
			if total > 1 {
				unb = m2 / (total - 1)
			}
			rm[ch] = (1-l.Momentum)*rm[ch] + l.Momentum*float32(mu)
			rv[ch] = (1-l.Momentum)*rv[ch] + l.Momentum*float32(unb)
		}
	}
	if update {
		dev.Upload(l.RunMean, rm)
		dev.Upload(l.RunVar, rv)
	}
	dev.Upload(mean, gm)
	dev.Upload(rstd, gv) // the global variance, for the normalisation
	conv(dev).BatchNormInference(l.Layout, y, x, l.W.Master(), l.B.Master(), mean, rstd, l.Eps)
	dev.Upload(rstd, rs)
}

// syncBackward is the backward of a synchronised BatchNorm (PyTorch's SyncBatchNorm.backward):
// the local Σdy and Σdy·x̂ (which are also the shift's and gain's gradients, local as in PyTorch:
// DDP averages them), all-reduced in one collective, then dx from the global sums and count.
func (l *BatchNorm2d) syncBackward(dx, dy, x, mean, rstd *tensor.Tensor) {
	dev := x.Device()
	sb, err := tensor.AsSyncBatchNorm(dev)
	if err != nil {
		panic("model: " + err.Error())
	}
	C := l.C
	sums := dev.Alloc(tensor.F32, "syncbn.sums", 2*C)
	defer dev.Free(sums)
	sdy, sdyx := sums.View(0, C), sums.View(C, C)
	sb.BatchNormBackwardReduce(l.Layout, sdy, sdyx, l.W.G, l.B.G, dy, x, mean, rstd)
	if cap(l.gather) < 2*C {
		l.gather = make([]float32, 2*C)
	}
	buf := l.gather[:2*C]
	dev.Download(buf, sums)
	if err := l.Sync.AllReduceSum(buf); err != nil {
		if l.syncErr == nil {
			l.syncErr = fmt.Errorf("model: SyncBatchNorm backward (%d channels): %w", C, err)
		}
		dev.Download(buf, sums)
	}
	dev.Upload(sums, buf)
	sb.BatchNormBackwardElemt(l.Layout, dx, dy, x, l.W.Master(), mean, rstd, sdy, sdyx, l.count)
}
