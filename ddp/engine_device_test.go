package ddp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The device path on the CPU: fakeIPCDev is the CPU device with a stand-in for the CUDA IPC
// all-reduce (tensor.IPCStreamDevice). Its "side stream" is a goroutine running launches in
// order; its "kernel" meets its peers three times as the CUDA kernel does (arrived, reduced,
// copied), spinning on their epochs and polling the abort flag, and reduces the rank's segment of
// the plan in the plan's order in f32, rounding once to the buffer's dtype. It exercises the
// engine's wiring (launch order, control-plane agreement, abort, bounded waits, copy back)
// without a GPU; the CUDA device's own reducer is tested in engine_device_cuda_test.go.

type fakeHub struct {
	mu   sync.Mutex
	next uint64
	reds map[uint64]*fakeRed
}

func newFakeHub() *fakeHub { return &fakeHub{reds: map[uint64]*fakeRed{}} }

type fakeIPCDev struct {
	*cpu.Device
	hub *fakeHub
	// hangAfter, when > 0: this rank's kernel number hangAfter stops after its first meeting
	// and never arrives again (a process killed mid-collective).
	hangAfter uint32
}

var _ tensor.IPCStreamDevice = fakeIPCDev{}

func (d fakeIPCDev) NewIPCReducer(buf *tensor.Tensor, plan tensor.IPCPlan) (tensor.IPCReducer, error) {
	if err := plan.Check(buf.Len()); err != nil {
		return nil, err
	}
	d.hub.mu.Lock()
	defer d.hub.mu.Unlock()
	d.hub.next++
	r := &fakeRed{d: d, buf: buf, plan: plan, id: d.hub.next}
	r.stalled.Store(-1)
	d.hub.reds[r.id] = r
	return r, nil
}

func (d fakeIPCDev) NewIPCStream() (tensor.IPCStream, error) {
	s := &fakeStream{q: make(chan func(), 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for f := range s.q {
			f()
			s.pending.Done()
		}
	}()
	return s, nil
}

type fakeStream struct {
	q       chan func()
	pending sync.WaitGroup
	done    chan struct{}
}

func (s *fakeStream) push(f func()) { s.pending.Add(1); s.q <- f }
func (s *fakeStream) Fork()         {} // the CPU device's work is done when its call returns
func (s *fakeStream) Join()         { s.pending.Wait() }
func (s *fakeStream) Close() error  { close(s.q); <-s.done; return nil }

type fakeFence chan struct{}

func (f fakeFence) Wait() { <-f }
func (f fakeFence) Done() bool {
	select {
	case <-f:
		return true
	default:
		return false
	}
}

type fakeRed struct {
	d       fakeIPCDev
	buf     *tensor.Tensor
	plan    tensor.IPCPlan
	id      uint64
	peers   []*fakeRed
	epoch   uint32           // launches so far (training goroutine)
	arrived [3]atomic.Uint32 // the last epoch that reached each meeting
	abort   atomic.Bool
	stalled atomic.Int32
	pinned  []byte // PinSegment's share
}

func (r *fakeRed) Handle() []byte { return binary.LittleEndian.AppendUint64(nil, r.id) }

func (r *fakeRed) Connect(handles [][]byte) error {
	r.d.hub.mu.Lock()
	defer r.d.hub.mu.Unlock()
	for q, h := range handles {
		p, ok := r.d.hub.reds[binary.LittleEndian.Uint64(h)]
		if !ok || len(h) != 8 {
			return fmt.Errorf("fake IPC: rank %d's handle is unknown", q)
		}
		r.peers = append(r.peers, p)
	}
	return nil
}

func (r *fakeRed) AllReduce(avg bool) { panic("fake IPC: only Launch") }

func (r *fakeRed) Close() error {
	r.d.hub.mu.Lock()
	defer r.d.hub.mu.Unlock()
	delete(r.d.hub.reds, r.id)
	return nil
}

func (r *fakeRed) Abort() { r.abort.Store(true) }
func (r *fakeRed) Stalled() int {
	return int(r.stalled.Load())
}

func (r *fakeRed) Launch(s tensor.IPCStream, scale, div float32) tensor.Fence {
	r.epoch++
	e := r.epoch
	f := make(fakeFence)
	s.(*fakeStream).push(func() { defer close(f); r.run(e, scale, div, 3) })
	return f
}

var _ tensor.IPCHalfReducer = (*fakeRed)(nil)

// PinSegment, ReduceScatter and AllGather are the halves apart (tensor.IPCHalfReducer): the
// "pinned" share is a byte slice in the buffer's dtype, copied from and into the rank's segment
// on the stream.
func (r *fakeRed) PinSegment() ([]byte, error) {
	if r.pinned == nil {
		s := r.plan.Segments[r.plan.Rank]
		r.pinned = make([]byte, (s[1]-s[0])*r.buf.DType().Size())
	}
	return r.pinned, nil
}

func (r *fakeRed) ReduceScatter(s tensor.IPCStream, scale, div float32) tensor.Fence {
	r.epoch++
	e := r.epoch
	f := make(fakeFence)
	s.(*fakeStream).push(func() {
		defer close(f)
		if r.pinned == nil { // the halves alone: the reduce ends in a meeting (no peer reads this buffer after)
			if r.run(e, scale, div, 1) {
				r.meet(1, e)
			}
			return
		}
		if r.run(e, scale, div, 1) {
			v := make([]float32, len(r.pinned)/r.buf.DType().Size())
			r.d.Download(v, r.seg(r.plan.Rank))
			copy(r.pinned, model.FloatBytes(r.buf.DType(), v))
		}
	})
	return f
}

func (r *fakeRed) AllGather(s tensor.IPCStream) tensor.Fence {
	r.epoch++
	e := r.epoch
	f := make(fakeFence)
	s.(*fakeStream).push(func() {
		defer close(f)
		if !r.abort.Load() && r.pinned != nil {
			r.d.Upload(r.seg(r.plan.Rank), model.BytesFloat(r.buf.DType(), r.pinned))
		}
		r.run(e, 1, 1, 2)
	})
	return f
}

// meet is the kernel's meeting ph of epoch e: false when aborted first.
func (r *fakeRed) meet(ph int, e uint32) bool {
	r.arrived[ph].Store(e)
	for q, p := range r.peers {
		for p.arrived[ph].Load() < e {
			if r.abort.Load() {
				r.stalled.CompareAndSwap(-1, int32(q))
				return false
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return true
}

func (r *fakeRed) seg(q int) *tensor.Tensor {
	s := r.plan.Segments[q]
	return r.buf.View(s[0], s[1]-s[0])
}

// run is the kernel: halves 1 the reduce (meeting 0, the reduce), 2 the gather (meeting 1, the
// copies, meeting 2), 3 both, as k_ipc_allreduce. It reports whether it finished (not aborted).
func (r *fakeRed) run(e uint32, scale, div float32, halves int) bool {
	if r.abort.Load() {
		return false
	}
	me := r.plan.Rank
	if halves&1 != 0 {
		if !r.reduce(e, scale, div) {
			return false
		}
	}
	if halves&2 == 0 {
		return true
	}
	if !r.meet(1, e) {
		return false
	}
	for q, p := range r.peers {
		if q == me {
			continue
		}
		s := r.plan.Segments[q]
		w := make([]float32, s[1]-s[0])
		p.d.Download(w, p.seg(q))
		r.d.Upload(r.seg(q), w)
	}
	return r.meet(2, e)
}

// reduce is the reduce half: meeting 0, then this rank's segment summed in the plan's order.
func (r *fakeRed) reduce(e uint32, scale, div float32) bool {
	if !r.meet(0, e) {
		return false
	}
	if r.d.hangAfter == e {
		for !r.abort.Load() { // killed: never arrives again (the test aborts it at its end)
			time.Sleep(time.Millisecond)
		}
		return false
	}
	me := r.plan.Rank
	n := r.plan.Segments[me][1] - r.plan.Segments[me][0]
	sum := make([]float32, n)
	v := make([]float32, n)
	for _, q := range r.plan.Order {
		p := r.peers[q]
		p.d.Download(v, p.seg(me))
		for i := range sum {
			sum[i] += float32(v[i] * scale)
		}
	}
	if div != 1 {
		for i := range sum {
			sum[i] /= div
		}
	}
	r.d.Upload(r.seg(me), sum)
	return true
}

// trainDevice trains the fp16 MLP of trainStaged with the engine on the device path (device) or
// the host path, over wire; stopAt ≥ 0: return after stopAt steps without taking the next one
// (the rank stops; onStop, when set, runs then, before the engine is closed), returning the
// error of the step that failed otherwise.
func trainDevice(t *testing.T, dev tensor.Device, rank, W int, comm Comm, d dataset, steps, b int, wire allreduce.Wire, device bool, stopAt int, onStop func()) (string, []float64, error) {
	return trainDeviceHosts(t, dev, rank, W, 1, comm, d, steps, b, wire, device, stopAt, onStop)
}

// trainDeviceHosts is trainDevice in a world of hosts (comm an allreduce.Hierarchy when hosts > 1).
func trainDeviceHosts(t *testing.T, dev tensor.Device, rank, W, hosts int, comm Comm, d dataset, steps, b int, wire allreduce.Wire, device bool, stopAt int, onStop func()) (string, []float64, error) {
	m, opt, free := newTestMLP(t, dev, tensor.F32)
	defer free()
	ps := m.Params()
	eng := New(ps, comm, Options{BucketCapMB: 0.0005, Wire: wire, HostStaging: true, DeviceGrace: 5 * time.Second})
	defer eng.Close()
	ctx := context.Background()
	if device {
		if err := eng.UseDevice(ctx, hosts); err != nil {
			return "", nil, err
		}
		if !eng.Device() {
			t.Fatalf("rank %d: UseDevice returned nil but the engine is not on the device path", rank)
		}
	}
	if err := eng.BroadcastParams(ctx); err != nil {
		return "", nil, err
	}
	x := dev.Alloc(tensor.F32, "x", b, nFeat)
	y := dev.Alloc(tensor.I32, "y", b)
	defer dev.Free(x)
	defer dev.Free(y)
	lh := []float32{0}
	var losses []float64
	for s := 0; s < steps; s++ {
		if s == stopAt {
			if onStop != nil {
				onStop()
			}
			return "", losses, nil
		}
		ps.ZeroGrad()
		lo := (s*W + rank) * b
		dev.Upload(x, d.x[lo*nFeat:(lo+b)*nFeat])
		dev.UploadI32(y, d.y[lo:lo+b])
		l := m.Forward(model.Inputs{X: x, Targets: y, Valid: b}, true)
		dev.Download(lh, l)
		eng.BeginMicro(0, 1)
		eng.BeginBackward()
		m.Backward(1)
		eng.EndBackward()
		if err := eng.Wait(ctx); err != nil {
			return "", losses, fmt.Errorf("rank %d step %d: %w", rank, s, err)
		}
		opt.Step(0.05)
		losses = append(losses, float64(lh[0]))
	}
	h, err := eng.CheckReplicas(ctx, steps)
	return h, losses, err
}

func TestEngineDevice_trainsLikeHostPath(t *testing.T) {
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16, allreduce.WireBF16} {
		for _, W := range []int{2, 4} {
			const steps, b = 5, 4
			d := makeData(W * b * steps)
			run := func(device bool) []trainOut {
				hub := newFakeHub()
				return trainEachRank(t, W, fmt.Sprintf("wire %s W=%d device %v", wire, W, device), func(r int, g *allreduce.Group) (string, []float64, error) {
					return trainDevice(t, fakeIPCDev{Device: cpu.New(), hub: hub}, r, W, g, d, steps, b, wire, device, -1, nil)
				})
			}
			dev, host := run(true), run(false)
			if t.Failed() {
				return
			}
			// The device adds every rank's value once in f32 and rounds once; the host ring
			// rounds each hop to the wire (16-bit) or adds in the ring's order (f32, the same
			// order: the plan is the ring's), so the curves agree within the wire's unit.
			tol := map[allreduce.Wire]float64{allreduce.WireF32: 1e-6, allreduce.WireF16: 2e-3, allreduce.WireBF16: 2e-2}[wire]
			checkDeviceLikeHost(t, wire, W, dev, host, tol)
			if wire == allreduce.WireF32 && dev[0].hash != host[0].hash {
				t.Errorf("wire f32 W=%d: param_sha256 %s… on the device path, %s… on the host path (want the same bits: same order of additions)", W, dev[0].hash[:12], host[0].hash[:12])
			}
		}
	}
}

// trainEachRank runs train, one rank's training, on every rank of a W-rank in-process world at
// once and returns each rank's param_sha256 and losses by rank; a rank's error marks the test
// failed (t.Errorf: the ranks still all return), named with what.
func trainEachRank(t *testing.T, W int, what string, train func(r int, g *allreduce.Group) (hash string, losses []float64, err error)) []trainOut {
	t.Helper()
	out := make([]trainOut, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		h, l, err := train(r, g)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		out[r] = trainOut{hash: h, losses: l}
	})
	return out
}

// checkDeviceLikeHost checks a run on the device path (dev) against the same run on the host
// path (host), both by rank: every rank's param_sha256 on the device path is rank 0's, and rank
// 0's loss at every step is within tol (relative) of the host path's.
func checkDeviceLikeHost(t *testing.T, wire allreduce.Wire, W int, dev, host []trainOut, tol float64) {
	t.Helper()
	for r := range dev {
		if dev[r].hash != dev[0].hash {
			t.Fatalf("wire %s W=%d: rank %d's param_sha256 differs from rank 0's on the device path", wire, W, r)
		}
	}
	for s := range dev[0].losses {
		a, h := dev[0].losses[s], host[0].losses[s]
		if rel := abs(a-h) / max(abs(h), 1e-12); rel > tol {
			t.Errorf("wire %s W=%d step %d: loss %g on the device path, %g on the host path (rel %.2g > %g)", wire, W, s, a, h, rel, tol)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A rank that stops between steps (its process gone: its group closes, its kernels never come)
// or in the middle of a device all-reduce (hangAfter): every other rank's step must fail within
// 15 s with an error naming it, and nothing may hang.
func TestEngineDevice_stoppedRankNamedWithin15s(t *testing.T) {
	for _, midKernel := range []bool{false, true} {
		const W, steps, b, dead = 3, 6, 4, 2
		d := makeData(W * b * steps)
		hub := newFakeHub()
		errs := make([]error, W)
		took := make([]time.Duration, W)
		var stoppedAt atomic.Int64
		eachRank(t, W, func(r int, g *allreduce.Group) {
			dev := fakeIPCDev{Device: cpu.New(), hub: hub}
			stop := -1
			if r == dead {
				if midKernel {
					dev.hangAfter = 3 // every bucket's third launch (step 2) stops after meeting 0
				} else {
					stop = 2
				}
			}
			start := time.Now()
			_, _, err := trainDevice(t, dev, r, W, g, d, steps, b, allreduce.WireF32, true, stop, nil)
			if r == dead {
				stoppedAt.Store(time.Now().UnixNano())
				g.Close() // the process is gone: its control-plane links close
				return
			}
			errs[r], took[r] = err, time.Since(start)
		})
		for r, err := range errs {
			if r == dead {
				continue
			}
			if err == nil {
				t.Errorf("midKernel %v: rank %d finished although rank %d stopped", midKernel, r, dead)
				continue
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", dead)) {
				t.Errorf("midKernel %v: rank %d's error does not name rank %d: %v", midKernel, r, dead, err)
			}
			t.Logf("midKernel %v: rank %d after %s: %v", midKernel, r, took[r].Round(time.Millisecond), err)
			if took[r] > 15*time.Second {
				t.Errorf("midKernel %v: rank %d failed after %s (want within 15 s)", midKernel, r, took[r])
			}
		}
	}
}

// waitFence: passes when the fence does; otherwise aborts at the deadline or when ctx ends, waits
// (bounded) for the kernel to give up, and names the rank it gave up on.
func TestWaitFence_boundedAndNamed(t *testing.T) {
	done := make(fakeFence)
	close(done)
	if err := waitFence(context.Background(), done, time.Second, func() { t.Fatal("aborted a finished fence") }, func() int { return -1 }, "b0"); err != nil {
		t.Fatalf("finished fence: %v", err)
	}
	// A kernel that gives up when aborted, having waited for rank 3.
	hung := func() (fakeFence, func(), func() int) {
		f := make(fakeFence)
		var stalled atomic.Int32
		stalled.Store(-1)
		var once sync.Once
		return f, func() { once.Do(func() { stalled.Store(3); close(f) }) }, func() int { return int(stalled.Load()) }
	}
	f, abort, stalled := hung()
	start := time.Now()
	err := waitFence(context.Background(), f, 100*time.Millisecond, abort, stalled, "bucket 7")
	if err == nil || !strings.Contains(err.Error(), "rank 3") || !strings.Contains(err.Error(), "bucket 7") || !f.Done() {
		t.Fatalf("deadline: got %v (fence done %v), want an error naming bucket 7 and rank 3", err, f.Done())
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 2*time.Second {
		t.Fatalf("deadline of 100ms: returned after %s", el)
	}
	f, abort, stalled = hung()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err = waitFence(ctx, f, time.Hour, abort, stalled, "b")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rank 3") {
		t.Fatalf("cancelled: got %v, want context.Canceled naming rank 3", err)
	}
	// A kernel that never gives up: waitFence still returns, after twice the grace.
	start = time.Now()
	err = waitFence(context.Background(), make(fakeFence), 50*time.Millisecond, func() {}, func() int { return -1 }, "b")
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("unabortable: got %v after %s", err, time.Since(start))
	}
	// Finished, but because another bucket's failure aborted it: an error, not the garbage.
	err = waitFence(context.Background(), done, time.Second, func() {}, func() int { return 1 }, "b")
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("aborted by another bucket: got %v", err)
	}
}

func TestDeviceScale_isAllreducesAvg(t *testing.T) {
	for _, W := range []int{2, 3, 8} {
		if s, d := deviceScale(tensor.F16, W); s != allreduce.AvgScale(W) || d != 1 {
			t.Errorf("f16 W=%d: scale %g div %g", W, s, d)
		}
		if s, d := deviceScale(tensor.F32, W); s != 1 || d != float32(W) {
			t.Errorf("f32 W=%d: scale %g div %g", W, s, d)
		}
	}
	if _, err := wireDType(allreduce.Wire(99)); err == nil {
		t.Error("an unknown wire was accepted")
	}
}

// UseDevice refuses, on every rank and without hanging, a device without the ability and several
// hosts without the hierarchy's rings (the sharded optimizer across hosts:
// TestEngineDevice_shardAcrossHostsRefused).
func TestEngineDevice_refusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		hosts int
		plain bool
		shard bool
		want  string
	}{
		{"cpu", 1, true, false, "has no all-reduce over IPC"},
		{"hosts", 2, false, false, "are not the rings inside and between 2 hosts"},
	} {
		hub := newFakeHub()
		eachRank(t, 2, func(r int, g *allreduce.Group) {
			var dev tensor.Device = fakeIPCDev{Device: cpu.New(), hub: hub}
			if c.plain {
				dev = cpu.New()
			}
			m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}}, 3)
			if err != nil {
				t.Error(err)
				return
			}
			defer m.Free()
			eng := New(m.Params(), g, Options{BucketCapMB: 0.0005, ShardOptimizer: c.shard})
			defer eng.Close()
			err = eng.UseDevice(context.Background(), c.hosts)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s rank %d: got %v, want one line containing %q", c.name, r, err, c.want)
			}
		})
	}
}

// Backward may complete buckets in a different order on different ranks (here: a permutation
// per rank and step); the device path still launches them in index order on every rank, so the
// kernels meet and the average is the host path's bits (f32 wire, the ring's order of additions).
func TestEngineDevice_launchesInIndexOrder(t *testing.T) {
	const W = 3
	sizes := []int{5, 300, 7, 1000, 3, 64, 257}
	hub := newFakeHub()
	grads := make([][]float32, W)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		dev := fakeIPCDev{Device: cpu.New(), hub: hub}
		ps := model.NewParams(dev)
		for i, n := range sizes {
			ps.Add(fmt.Sprintf("p%d", i), model.Init{Value: 0}, false, n)
		}
		ps.Build(tensor.F32)
		defer ps.Free()
		e := New(ps, g, Options{BucketCapMB: 0.001, Wire: allreduce.WireF32, DeviceGrace: 2 * time.Second})
		defer e.Close()
		if err := e.UseDevice(context.Background(), 1); err != nil {
			t.Errorf("rank %d: %v", r, err)
			return
		}
		if len(e.buckets) < 3 {
			t.Errorf("want several buckets, got %d", len(e.buckets))
			return
		}
		for step := range 3 {
			dev.Upload(ps.Grad, rankGrads(ps.N, r))
			e.BeginMicro(0, 1)
			e.BeginBackward()
			perm := rand.New(rand.NewPCG(uint64(r), uint64(step))).Perm(len(ps.List))
			for _, i := range perm {
				ps.List[i].Ready()
			}
			e.EndBackward()
			if err := e.Wait(context.Background()); err != nil {
				t.Errorf("rank %d step %d: %v", r, step, err)
				return
			}
		}
		grads[r] = tensor.ToHost(ps.Grad)
	})
	if t.Failed() {
		return
	}
	host, _ := averageOnceWire(t, W, sizes, 0.001, cpuDev, true, allreduce.WireF32) // the host path's engine, same buckets
	want := host[0]
	for r := range grads {
		for i := range want {
			if math.Float32bits(grads[r][i]) != math.Float32bits(want[i]) {
				t.Fatalf("rank %d gradient %d: device path %g, host ring %g (want the same bits)", r, i, grads[r][i], want[i])
			}
		}
	}
}

// ddp.shard_optimizer on the device path (one host; fakeIPCDev): the buckets' reduce halves alone
// leave each rank its segment, the sharded step updates it, GatherParams' gather halves copy every
// rank's updated segment of the weights the next forward reads from its owner. The run ends
// bit-identical to the device path unsharded — weights, 16-bit copy, gradient norms, AdamW's m and
// v — since the same reduce computes the owned segments, the update is elementwise and the gathers
// copy bits: f32, f16 (with the loss scaler) and bf16, W 2 and 4, accumulation, clipping, several
// channels; with the f32 master sharded too (ddp.shard_master) for f16 and bf16.
func TestShardDevice_bitIdenticalToUnsharded(t *testing.T) {
	type tc struct {
		compute tensor.DType
		wire    allreduce.Wire
	}
	for _, c := range []tc{{tensor.F32, allreduce.WireF32}, {tensor.F16, allreduce.WireF16}, {tensor.BF16, allreduce.WireBF16}} {
		for _, W := range []int{2, 4} {
			for _, ch := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/W%d/ch%d", c.compute, W, ch), func(t *testing.T) {
					b, k, steps := 3, 2, 5
					d := makeData(W * b * k * steps)
					hub := newFakeHub()
					sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: c.compute, wire: c.wire, bucketMB: 0.0005,
						clip: 0.5, channels: ch, injectRank: -1, device: true,
						newDev: func(*testing.T, int) (tensor.Device, func()) {
							return fakeIPCDev{Device: cpu.New(), hub: hub}, func() {}
						}}
					plain := runShardWorld(t, sc, d)
					sc.shard = true
					sharded := runShardWorld(t, sc, d)
					if t.Failed() {
						return
					}
					checkSame(t, plain, sharded)
					for r := range sharded {
						if sharded[r].hash != sharded[0].hash {
							t.Errorf("rank %d's param_sha256 differs from rank 0's", r)
						}
					}
					if c.compute == tensor.F32 {
						return
					}
					// ddp.shard_master too (the f32 master for the shard only): the replica
					// check gathers it from the owners (stage 3's H100 run panicked here when the
					// device gathers marked a sharded master stale).
					sc.shardMaster = true
					master := runShardWorld(t, sc, d)
					if !t.Failed() {
						checkSame(t, plain, master)
					}
				})
			}
		}
	}
}

// ddp.shard_optimizer with the device path across hosts is not built: refused on every rank in one
// line, without hanging.
func TestEngineDevice_shardAcrossHostsRefused(t *testing.T) {
	hub := newFakeHub()
	hierWorld(t, 2, 2, func(r int, comm Comm) bool {
		dev := fakeIPCDev{Device: cpu.New(), hub: hub}
		m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}}, 3)
		if err != nil {
			t.Error(err)
			return false
		}
		defer m.Free()
		eng := New(m.Params(), comm, Options{BucketCapMB: 0.0005, ShardOptimizer: true, HostStaging: true})
		defer eng.Close()
		err = eng.UseDevice(context.Background(), 2)
		if err == nil || !strings.Contains(err.Error(), "shard_optimizer across hosts") || strings.Contains(err.Error(), "\n") {
			t.Errorf("rank %d: got %v", r, err)
		}
		return true
	})
}
