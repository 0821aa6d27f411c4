package model

import (
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// memReducer is a StatReducer between goroutines of one test: the processes' buffers summed in
// rank order once all have arrived.
type memReducer struct {
	rank int
	hub  *memHub
}

type memHub struct {
	mu    sync.Mutex
	cond  *sync.Cond
	size  int
	bufs  [][]float32
	round int
	in    int
	sum   []float32
}

func newMemHub(size int) []*memReducer {
	h := &memHub{size: size, bufs: make([][]float32, size)}
	h.cond = sync.NewCond(&h.mu)
	rs := make([]*memReducer, size)
	for r := range rs {
		rs[r] = &memReducer{rank: r, hub: h}
	}
	return rs
}

func (m *memReducer) Rank() int { return m.rank }
func (m *memReducer) Size() int { return m.hub.size }
func (m *memReducer) AllReduceSum(buf []float32) error {
	h := m.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	round := h.round
	h.bufs[m.rank] = buf
	h.in++
	if h.in == h.size {
		sum := make([]float32, len(buf))
		for _, b := range h.bufs {
			for i, v := range b {
				sum[i] += v
			}
		}
		h.sum, h.in = sum, 0
		h.round++
		h.cond.Broadcast()
	} else {
		for h.round == round {
			h.cond.Wait()
		}
	}
	copy(buf, h.sum)
	return nil
}

// bnRun is one process's BatchNorm training forward and backward: y, dx, the gain and shift
// gradients, and the running statistics after the step.
type bnRun struct{ y, dx, dw, db, rm, rv []float32 }

func runBN(x, dy []float32, n, c, hw int, sync StatReducer) bnRun {
	dev := cpu.New()
	ps, bufs := NewParams(dev), NewBuffers(dev)
	bn := NewBatchNorm2d(ps, bufs, "bn", c)
	ps.Build(tensor.F32)
	bufs.Build()
	w := make([]float32, c)
	for i := range w {
		w[i] = 0.5 + 0.25*float32(i)
	}
	dev.Upload(bn.W.W, w)
	dev.Upload(bn.B.W, []float32{0.1, -0.2, 0.3}[:c])
	bn.Sync = sync
	X := tensor.FromHost(dev, tensor.F32, "x", x, n, c, hw, 1)
	DY := tensor.FromHost(dev, tensor.F32, "dy", dy, n, c, hw, 1)
	Y := dev.Alloc(tensor.F32, "y", n, c, hw, 1)
	DX := dev.Alloc(tensor.F32, "dx", n, c, hw, 1)
	mean, rstd := dev.Alloc(tensor.F32, "mean", c), dev.Alloc(tensor.F32, "rstd", c)
	bn.Forward(Y, mean, rstd, X, true)
	bn.Backward(DX, DY, X, mean, rstd)
	return bnRun{tensor.ToHost(Y), tensor.ToHost(DX), tensor.ToHost(bn.W.G), tensor.ToHost(bn.B.G), tensor.ToHost(bn.RunMean), tensor.ToHost(bn.RunVar)}
}

// SyncBatchNorm over world 2 × micro-batch b is BatchNorm over world 1 × 2b: the same outputs,
// input gradients, running statistics, and gain/shift gradients summed over the ranks (DDP
// averages them, as the 2b loss's mean over ranks' means). Tolerance: 2e-6 relative to the
// largest magnitude of each quantity — the synchronised path rounds the local mean and variance
// to f32 before combining them in f64 (≈6e-8 relative each) and sums Σdy, Σdy·x̂ in f32 (≈1e-7),
// then normalises with f32 statistics; a few f32 ulps of O(1) values, far below 2e-6, and far
// above zero so the test does not pin rounding.
func TestSyncBatchNorm_world2EqualsWorld1TwiceTheBatch(t *testing.T) {
	const b, c, hw = 3, 3, 10
	rng := rand.New(rand.NewSource(5))
	x, dy := make([]float32, 2*b*c*hw), make([]float32, 2*b*c*hw)
	for i := range x {
		x[i] = float32(rng.NormFloat64())*2 + 3 // an offset mean: the variance must not cancel
		dy[i] = float32(rng.NormFloat64())
	}
	ref := runBN(x, dy, 2*b, c, hw, nil)
	half := b * c * hw
	reds := newMemHub(2)
	var got [2]bnRun
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r] = runBN(x[r*half:(r+1)*half], dy[r*half:(r+1)*half], b, c, hw, reds[r])
		}()
	}
	wg.Wait()
	cat := func(f func(bnRun) []float32) []float32 {
		return append(append([]float32{}, f(got[0])...), f(got[1])...)
	}
	sum := func(f func(bnRun) []float32) []float32 {
		s := make([]float32, c)
		for i := range s {
			s[i] = f(got[0])[i] + f(got[1])[i]
		}
		return s
	}
	for _, q := range []struct {
		name      string
		got, want []float32
	}{
		{"y", cat(func(r bnRun) []float32 { return r.y }), ref.y},
		{"dx", cat(func(r bnRun) []float32 { return r.dx }), ref.dx},
		{"dw (sum over ranks)", sum(func(r bnRun) []float32 { return r.dw }), ref.dw},
		{"db (sum over ranks)", sum(func(r bnRun) []float32 { return r.db }), ref.db},
		{"running_mean rank 0", got[0].rm, ref.rm},
		{"running_var rank 0", got[0].rv, ref.rv},
		{"running_mean rank 1", got[1].rm, ref.rm},
		{"running_var rank 1", got[1].rv, ref.rv},
	} {
		var scale float64
		for _, v := range q.want {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for i := range q.want {
			if d := math.Abs(float64(q.got[i] - q.want[i])); d > 2e-6*scale {
				t.Fatalf("%s[%d] = %g, world 1 gives %g (|diff| %g > 2e-6 × %g)", q.name, i, q.got[i], q.want[i], d, scale)
			}
		}
	}
	// The running statistics are bit-identical on the ranks: the same f64 combination everywhere.
	for i := range got[0].rm {
		if got[0].rm[i] != got[1].rm[i] || got[0].rv[i] != got[1].rv[i] {
			t.Fatalf("running statistics differ between ranks at channel %d", i)
		}
	}
}

// One process with a reducer of world 1 gives what the unsynchronised layer gives (to f32
// rounding of the statistics).
func TestSyncBatchNorm_world1(t *testing.T) {
	const n, c, hw = 4, 3, 7
	rng := rand.New(rand.NewSource(9))
	x, dy := make([]float32, n*c*hw), make([]float32, n*c*hw)
	for i := range x {
		x[i], dy[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	ref, got := runBN(x, dy, n, c, hw, nil), runBN(x, dy, n, c, hw, newMemHub(1)[0])
	for i := range ref.y {
		if math.Abs(float64(ref.y[i]-got.y[i])) > 1e-5 || math.Abs(float64(ref.dx[i]-got.dx[i])) > 1e-5 {
			t.Fatalf("element %d: y %g/%g dx %g/%g", i, got.y[i], ref.y[i], got.dx[i], ref.dx[i])
		}
	}
}
