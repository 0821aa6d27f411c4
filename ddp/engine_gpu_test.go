package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// Tests of the staged gradient path (engine_gpu.go) that run anywhere: stagingCPU gives the CPU
// device the tensor.GradStager ability the way the CUDA device has it (the f16 cast with the
// 1/W factor, a buffer the comm goroutine waits for per bucket, the widen back at the step's
// end), so the engine's hooks run under the race detector. engine_gpu_cuda_test.go runs the same
// harness on the GPU.

// stagingCPU is the CPU device with a host-only GradStager.
type stagingCPU struct {
	*cpu.Device
}

var _ tensor.GradStager = stagingCPU{}

func (d stagingCPU) PinnedBytes() int64 { return 0 }

func (d stagingCPU) NewGradStaging(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
	return newCPUStaging(d.Device, grad, ranges, half.F16), nil
}

// wireStagingCPU also stages in bf16 (tensor.WireStager), as the CUDA device does; stagingCPU
// stands for a device that stages in f16 only.
type wireStagingCPU struct{ stagingCPU }

var _ tensor.WireStager = wireStagingCPU{}

func (d wireStagingCPU) NewGradStagingWire(grad *tensor.Tensor, ranges [][2]int, wire tensor.DType) (tensor.GradStaging, error) {
	switch wire {
	case tensor.F16:
		return newCPUStaging(d.Device, grad, ranges, half.F16), nil
	case tensor.BF16:
		return newCPUStaging(d.Device, grad, ranges, half.BF16), nil
	}
	return nil, fmt.Errorf("staging in %s", wire)
}

func newCPUStaging(dev *cpu.Device, grad *tensor.Tensor, ranges [][2]int, f half.Format) *cpuStaging {
	s := &cpuStaging{dev: dev, grad: grad, ranges: ranges, f: f}
	for _, r := range ranges {
		s.half = append(s.half, make([]uint16, r[1]-r[0]))
		s.ready = append(s.ready, make(chan struct{}, 1))
	}
	s.returned = make([]bool, len(ranges))
	return s
}

// cpuStaging: Stage casts at once (the CPU device is synchronous) and signals the bucket; Return
// only marks it, and Finish widens the returned buckets on the training goroutine (the CPU device
// is driven by one goroutine).
type cpuStaging struct {
	dev      *cpu.Device
	grad     *tensor.Tensor
	ranges   [][2]int
	f        half.Format // the staged 16-bit format
	half     [][]uint16
	ready    []chan struct{}
	mu       sync.Mutex
	returned []bool
}

func (s *cpuStaging) Stage(i int, scale float32) {
	r := s.ranges[i]
	x := make([]float32, r[1]-r[0])
	s.dev.Download(x, s.grad.View(r[0], r[1]-r[0]))
	for j := range x {
		x[j] *= scale
	}
	s.f.Encode(s.half[i], x)
	s.ready[i] <- struct{}{}
}

func (s *cpuStaging) Host(i int) []uint16 { <-s.ready[i]; return s.half[i] }

func (s *cpuStaging) Return(i int) {
	s.mu.Lock()
	s.returned[i] = true
	s.mu.Unlock()
}

func (s *cpuStaging) Finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ok := range s.returned {
		if !ok {
			continue
		}
		r := s.ranges[i]
		x := make([]float32, r[1]-r[0])
		s.f.Decode(x, s.half[i])
		s.dev.Upload(s.grad.View(r[0], r[1]-r[0]), x)
		s.returned[i] = false
	}
}

func (s *cpuStaging) PinnedBytes() int64 { return 0 }
func (s *cpuStaging) DeviceBytes() int64 { return 0 }
func (s *cpuStaging) Close()             {}

// newDevFunc opens rank's device and returns it with its cleanup.
type newDevFunc func(t *testing.T, rank int) (tensor.Device, func())

func cpuDev(t *testing.T, rank int) (tensor.Device, func()) { return cpu.New(), func() {} }
func stagingDev(t *testing.T, rank int) (tensor.Device, func()) {
	return stagingCPU{cpu.New()}, func() {}
}
func wireStagingDev(t *testing.T, rank int) (tensor.Device, func()) {
	return wireStagingCPU{stagingCPU{cpu.New()}}, func() {}
}

// rankGrads is rank r's gradient slab for the averaging tests: N(0,1) values with a spread of
// magnitudes, different on every rank.
func rankGrads(n, rank int) []float32 {
	r := rand.New(rand.NewPCG(uint64(rank)+11, 3))
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(12)-6)))
	}
	return g
}

// averageOnce runs one syncing micro-step over W ranks without a model: each rank's gradient
// slab (parameters of the given sizes) is filled with rankGrads, every parameter reports ready in
// reverse order as backward would, and Wait returns the averaged slab, per rank. staged says
// whether each rank's engine took the staged path.
func averageOnce(t *testing.T, W int, sizes []int, bucketMB float64, newDev newDevFunc, hostStaging bool) (grads [][]float32, staged []bool) {
	t.Helper()
	return averageOnceWire(t, W, sizes, bucketMB, newDev, hostStaging, allreduce.WireF16)
}

// averageOnceWire is averageOnce on wire.
func averageOnceWire(t *testing.T, W int, sizes []int, bucketMB float64, newDev newDevFunc, hostStaging bool, wire allreduce.Wire) (grads [][]float32, staged []bool) {
	t.Helper()
	return averageWith(t, W, sizes, newDev, Options{BucketCapMB: bucketMB, Wire: wire, HostStaging: hostStaging}, nil)
}

// averageWith is averageOnce with the engine's options, and setup (nil: none) called on every
// rank's engine before the steps.
func averageWith(t *testing.T, W int, sizes []int, newDev newDevFunc, opts Options, setup func(*Engine) error) (grads [][]float32, staged []bool) {
	t.Helper()
	grads = make([][]float32, W)
	staged = make([]bool, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		dev, done := newDev(t, r)
		defer done()
		ps := model.NewParams(dev)
		for i, n := range sizes {
			ps.Add(fmt.Sprintf("p%d", i), model.Init{Value: 0}, false, n)
		}
		ps.Build(tensor.F32)
		defer ps.Free()
		e := New(ps, g, opts)
		defer e.Close()
		if setup != nil {
			if err := setup(e); err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
		}
		staged[r] = e.Staged()
		for step := 0; step < 2; step++ { // twice: buffers are reused
			dev.Upload(ps.Grad, rankGrads(ps.N, r))
			e.BeginMicro(0, 1)
			e.BeginBackward()
			for i := len(ps.List) - 1; i >= 0; i-- {
				ps.List[i].Ready()
			}
			e.EndBackward()
			if err := e.Wait(context.Background()); err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
		}
		grads[r] = tensor.ToHost(ps.Grad)
	})
	return grads, staged
}

// checkAverages: every rank holds the same bits, and the staged result is within f16 rounding of
// the host path's: each path rounds every contribution and the sum to half (relative 2^-11 each),
// so they differ by at most about 2^-9 of the contributions' magnitudes (plus half's subnormal
// step).
func checkAverages(t *testing.T, W int, sizes []int, staged, host [][]float32) {
	t.Helper()
	checkAveragesUnit(t, W, sizes, staged, host, math.Pow(2, -9))
}

// checkAveragesUnit is checkAverages with the tolerance's multiple of the contributions'
// magnitudes: 2⁻⁹ for f16 (11 significant bits), 2⁻⁶ for bf16 (8).
func checkAveragesUnit(t *testing.T, W int, sizes []int, staged, host [][]float32, unit float64) {
	t.Helper()
	for r := 1; r < W; r++ {
		for i := range staged[0] {
			if math.Float32bits(staged[r][i]) != math.Float32bits(staged[0][i]) {
				t.Fatalf("staged path: rank %d gradient %d = %g, rank 0 has %g (must be bit-identical)", r, i, staged[r][i], staged[0][i])
			}
		}
	}
	n := 0
	for _, s := range sizes {
		n += s
	}
	inputs := make([][]float32, W)
	for r := range inputs {
		inputs[r] = rankGrads(n, r)
	}
	same := 0
	for i := 0; i < n; i++ {
		var mag, exact float64
		for r := 0; r < W; r++ {
			mag += math.Abs(float64(inputs[r][i])) / float64(W)
			exact += float64(inputs[r][i]) / float64(W)
		}
		tol := mag*unit + math.Pow(2, -23)
		if d := math.Abs(float64(staged[0][i]) - float64(host[0][i])); d > tol {
			t.Fatalf("gradient %d: staged %g, host path %g (exact %g): |diff| %g > %g", i, staged[0][i], host[0][i], exact, d, tol)
		}
		if d := math.Abs(float64(staged[0][i]) - exact); d > tol {
			t.Fatalf("gradient %d: staged %g, exact average %g: |diff| %g > %g", i, staged[0][i], exact, d, tol)
		}
		if staged[0][i] == host[0][i] {
			same++
		}
	}
	t.Logf("W=%d: %d gradients, %.1f%% bit-equal to the host path's", W, n, 100*float64(same)/float64(n))
}

// Sizes with odd lengths, so bucket starts fall on every alignment.
var stagingSizes = []int{1000, 7, 4096, 3, 12289, 768, 1, 5000, 2}

func TestEngineStaged_averagesLikeHostPath(t *testing.T) {
	for _, W := range []int{2, 3} {
		t.Run(fmt.Sprint("W", W), func(t *testing.T) {
			staged, on := averageOnce(t, W, stagingSizes, 0.01, stagingDev, false)
			for r, ok := range on {
				if !ok {
					t.Fatalf("rank %d: the engine did not take the staged path", r)
				}
			}
			host, on := averageOnce(t, W, stagingSizes, 0.01, stagingDev, true)
			if on[0] {
				t.Fatal("Options.HostStaging did not keep the host path")
			}
			checkAverages(t, W, stagingSizes, staged, host)
		})
	}
}

// The bf16 wire stages on a device that stages in bf16 (tensor.WireStager), with the same
// guarantees as f16: bit-identical ranks, within bf16 rounding of the host path and the exact
// average.
func TestEngineStaged_bf16WireAveragesLikeHostPath(t *testing.T) {
	for _, W := range []int{2, 3} {
		t.Run(fmt.Sprint("W", W), func(t *testing.T) {
			staged, on := averageOnceWire(t, W, stagingSizes, 0.01, wireStagingDev, false, allreduce.WireBF16)
			for r, ok := range on {
				if !ok {
					t.Fatalf("rank %d: the engine did not take the staged path with the bf16 wire", r)
				}
			}
			host, on := averageOnceWire(t, W, stagingSizes, 0.01, wireStagingDev, true, allreduce.WireBF16)
			if on[0] {
				t.Fatal("Options.HostStaging did not keep the host path")
			}
			checkAveragesUnit(t, W, stagingSizes, staged, host, math.Pow(2, -6))
			f16, _ := averageOnceWire(t, W, stagingSizes, 0.01, wireStagingDev, false, allreduce.WireF16)
			same := 0
			for i := range f16[0] {
				if f16[0][i] == staged[0][i] {
					same++
				}
			}
			if same == len(f16[0]) {
				t.Fatal("the bf16 wire's staged result is the f16 wire's bit for bit: bf16 was not staged")
			}
		})
	}
}

// The f32 wire never stages (the ring would send f32), nor does a device without the ability, nor
// the bf16 wire on a device that stages in f16 only.
func TestEngineStaged_onlyWithF16WireAndStager(t *testing.T) {
	nw := allreduce.NewInprocNetwork(2)
	for _, c := range []struct {
		dev  tensor.Device
		wire allreduce.Wire
		want bool
	}{{stagingCPU{cpu.New()}, allreduce.WireF16, true}, {stagingCPU{cpu.New()}, allreduce.WireF32, false}, {cpu.New(), allreduce.WireF16, false},
		{wireStagingCPU{stagingCPU{cpu.New()}}, allreduce.WireBF16, true}, {wireStagingCPU{stagingCPU{cpu.New()}}, allreduce.WireF16, true},
		{stagingCPU{cpu.New()}, allreduce.WireBF16, false}} {
		ps := model.NewParams(c.dev)
		ps.Add("w", model.Init{Value: 1}, false, 10)
		ps.Build(tensor.F32)
		// A group of size 2 whose peer never runs: New only plans, nothing is sent.
		g2, err := allreduce.NewGroup(context.Background(), allreduce.Config{Rank: 0, WorldSize: 2, Transport: nw.Transport(0)})
		if err != nil {
			t.Fatal(err)
		}
		e := New(ps, g2, Options{Wire: c.wire})
		if e.Staged() != c.want {
			t.Errorf("%T wire %s: staged %v, want %v", c.dev, c.wire, e.Staged(), c.want)
		}
		e.Close()
		g2.Close()
		ps.Free()
	}
}

// trainStaged trains an fp16 MLP replica with the f16 wire on rank's device and returns the
// final parameter hash and the loss of each step.
func trainStaged(t *testing.T, dev tensor.Device, rank, W int, comm Comm, d dataset, steps, b int, hostStaging bool) (string, []float64, bool) {
	m, opt, free := newTestMLP(t, dev, tensor.F16)
	defer free()
	ps := m.Params()
	sc, err := model.NewScaler(dev, model.ScalerConfig{Enabled: true, Init: 1024, Growth: 2, Backoff: 0.5, Interval: 1000, MinScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Free()
	eng := New(ps, comm, Options{BucketCapMB: 0.0005, Wire: allreduce.WireF16, HostStaging: hostStaging})
	defer eng.Close()
	ctx := context.Background()
	if err := eng.BroadcastParams(ctx); err != nil {
		t.Fatal(err)
	}
	x := dev.Alloc(tensor.F32, "x", b, nFeat)
	y := dev.Alloc(tensor.I32, "y", b)
	defer dev.Free(x)
	defer dev.Free(y)
	lh := []float32{0}
	var losses []float64
	for s := 0; s < steps; s++ {
		ps.ZeroGrad()
		lo := (s*W + rank) * b
		dev.Upload(x, d.x[lo*nFeat:(lo+b)*nFeat])
		dev.UploadI32(y, d.y[lo:lo+b])
		l := m.Forward(model.Inputs{X: x, Targets: y, Valid: b}, true)
		dev.Download(lh, l)
		eng.BeginMicro(0, 1)
		eng.BeginBackward()
		m.Backward(sc.Scale())
		eng.EndBackward()
		if err := eng.Wait(ctx); err != nil {
			t.Fatalf("rank %d step %d: %v", rank, s, err)
		}
		found := sc.FoundInf(sc.UnscaleCheck(ps))
		anyInf, err := eng.AgreeAny(ctx, found)
		if err != nil {
			t.Fatal(err)
		}
		if !anyInf {
			opt.Step(0.05)
		}
		if err := sc.Update(anyInf); err != nil {
			t.Fatal(err)
		}
		lv := []float32{lh[0]}
		if err := comm.AllReduce(ctx, lv, allreduce.Avg, allreduce.WireF32); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, float64(lv[0]))
	}
	h, err := eng.CheckReplicas(ctx, steps)
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	return h, losses, eng.Staged()
}

type trainOut struct {
	hash   string
	losses []float64
	staged bool
}

func trainWorldStaged(t *testing.T, W, steps, b int, newDev newDevFunc, hostStaging bool) []trainOut {
	d := makeData(W * b * steps)
	out := make([]trainOut, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		dev, done := newDev(t, r)
		defer done()
		h, l, s := trainStaged(t, dev, r, W, g, d, steps, b, hostStaging)
		out[r] = trainOut{h, l, s}
	})
	return out
}

// checkTraining: identical replicas on the staged path, staged on every rank, and a loss curve
// within 1% of the host path's at every step (both send f16; they round partial sums differently).
func checkTraining(t *testing.T, staged, host []trainOut) {
	t.Helper()
	for r, o := range staged {
		if !o.staged {
			t.Fatalf("rank %d did not take the staged path", r)
		}
		if o.hash != staged[0].hash {
			t.Fatalf("rank %d param_sha256 %s, rank 0 %s", r, o.hash, staged[0].hash)
		}
	}
	for s := range host[0].losses {
		a, b := staged[0].losses[s], host[0].losses[s]
		if rel := math.Abs(a-b) / b; rel > 1e-2 {
			t.Fatalf("step %d: loss %g staged, %g on the host path (%.2g%% apart, bound 1%%)", s, a, b, 100*rel)
		}
	}
	if l := staged[0].losses; l[len(l)-1] >= l[0] {
		t.Fatalf("loss did not fall: %v", l)
	}
}

func TestEngineStaged_trainsLikeHostPath(t *testing.T) {
	staged := trainWorldStaged(t, 2, 8, 6, stagingDev, false)
	host := trainWorldStaged(t, 2, 8, 6, cpuDev, false)
	checkTraining(t, staged, host)
}
