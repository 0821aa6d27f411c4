package ddp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// ddp.shard_gather: device (shard_peer.go) on the CPU: mirrorStagingCPU is shardStagingCPU (a CPU
// device staging like the CUDA device) that also maps its peers' tensors, as CUDA IPC does: the
// ranks of one world register their tensors in a hub, and Pull copies a peer's range into this
// rank's tensor at once (the CPU device's stream is the calling goroutine).

type mirrorHub struct {
	mu    sync.Mutex
	ts    map[int]*tensor.Tensor
	pulls map[int]int // per rank: the copies it made
}

func newMirrorHub() *mirrorHub {
	return &mirrorHub{ts: map[int]*tensor.Tensor{}, pulls: map[int]int{}}
}

type mirrorStagingCPU struct {
	shardStagingCPU
	hub *mirrorHub
}

var _ tensor.PeerMirrorDevice = mirrorStagingCPU{}

func (d mirrorStagingCPU) NewPeerMirror(t *tensor.Tensor, rank, size int) (tensor.PeerMirror, error) {
	d.hub.mu.Lock()
	defer d.hub.mu.Unlock()
	d.hub.ts[rank] = t
	return &cpuMirror{hub: d.hub, t: t, rank: rank, size: size}, nil
}

type cpuMirror struct {
	hub        *mirrorHub
	t          *tensor.Tensor
	rank, size int
	peers      []*tensor.Tensor
}

func (m *cpuMirror) Handle() []byte { return []byte(fmt.Sprint(m.rank)) }

func (m *cpuMirror) Connect(handles [][]byte) error {
	if len(handles) != m.size {
		return fmt.Errorf("%d handles for %d ranks", len(handles), m.size)
	}
	m.hub.mu.Lock()
	defer m.hub.mu.Unlock()
	for q, h := range handles {
		p := m.hub.ts[q]
		if string(h) != fmt.Sprint(q) || p == nil || p.Len() != m.t.Len() || p.DType() != m.t.DType() {
			return fmt.Errorf("rank %d's handle %q: no tensor like %s", q, h, m.t)
		}
		m.peers = append(m.peers, p)
	}
	return nil
}

func (m *cpuMirror) Pull(peer, lo, hi int) {
	x := make([]float32, hi-lo)
	m.t.Device().Download(x, m.peers[peer].View(lo, hi-lo))
	m.t.Device().Upload(m.t.View(lo, hi-lo), x)
	m.hub.mu.Lock()
	m.hub.pulls[m.rank]++
	m.hub.mu.Unlock()
}

func (m *cpuMirror) Close() error { return nil }

// The sharded step with ddp.shard_gather: device ends with the very weights (param_sha256, the
// f16 copy, m and v) of the unsharded run, at W = 2 and 4, with accumulation, clipping, a skipped
// step and two channels, with and without ddp.overlap_gather and ddp.shard_master; every rank
// copied from its peers (the hub counts the copies: W−1 a bucket and step) and none of the f16
// weights went through the staging buffers' all-gather.
func TestShardStaged_peerGatherBitIdentical(t *testing.T) {
	runPeerGather(t, func(hub *mirrorHub) newDevFunc {
		return func(t *testing.T, rank int) (tensor.Device, func()) {
			return mirrorStagingCPU{shardStagingCPU{cpu.New()}, hub}, func() {}
		}
	})
}

// runPeerGather is the test above with the devices newDev makes (hub: the CPU stand-in's, which
// counts the copies; a real device's leaves it empty, and the count is not checked).
func runPeerGather(t *testing.T, newDev func(hub *mirrorHub) newDevFunc) {
	for _, W := range []int{2, 4} {
		for _, v := range []struct{ overlap, master bool }{{false, false}, {true, false}, {true, true}} {
			name := fmt.Sprintf("W%d/overlap=%v/shard_master=%v", W, v.overlap, v.master)
			t.Run(name, func(t *testing.T) {
				b, k, steps := 3, 2, 6
				d := makeData(W * b * k * steps)
				hub := newMirrorHub()
				sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16, bucketMB: 0.0005,
					clip: 0.5, channels: 2, injectRank: 1, injectStep: 3, newDev: newDev(hub)}
				plain := runShardWorld(t, sc, d)
				sc.shard, sc.overlap, sc.shardMaster, sc.peerGather = true, v.overlap, v.master, true
				sharded := runShardWorld(t, sc, d)
				checkSame(t, plain, sharded)
				if v.master {
					checkMasterShard(t, plain, sharded)
				}
				for r := range sharded {
					if !sharded[r].staged || sharded[r].skipped != 1 {
						t.Errorf("rank %d: staged %v, skipped %d: want the staged path and one skipped step", r, sharded[r].staged, sharded[r].skipped)
					}
					if len(hub.pulls) > 0 && (hub.pulls[r] == 0 || hub.pulls[r]%(W-1) != 0) {
						t.Errorf("rank %d made %d copies from its peers: want a positive multiple of %d", r, hub.pulls[r], W-1)
					}
				}
			})
		}
	}
}

// UsePeerGather refuses, on every rank and naming why, where the weights are not gathered on the
// sharded staged path: unsharded, and sharded on the CPU device's own path (no staging).
func TestUsePeerGather_refusedOffTheStagedPath(t *testing.T) {
	for _, c := range []struct {
		name  string
		shard bool
		dev   func() tensor.Device
		want  string
	}{
		{"unsharded", false, func() tensor.Device { return mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()} }, "needs ddp.shard_optimizer"},
		{"cpu path", true, func() tensor.Device { return cpu.New() }, "needs the sharded staged path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := useOnTwoRanks(t, c.dev, Options{BucketCapMB: 0.01, Wire: allreduce.WireF16, ShardOptimizer: c.shard},
				(*Engine).PeerGatherRefusal, (*Engine).UsePeerGather)
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
					t.Errorf("rank %d: %v; want an error naming the rank and %q", r, err, c.want)
				}
			}
		})
	}
}

// useOnTwoRanks runs a world of 2 engines with opts, each on a device dev makes, checks on each
// that refusal says no, then asks for use and returns each rank's error.
func useOnTwoRanks(t *testing.T, dev func() tensor.Device, opts Options, refusal func(*Engine) error, use func(*Engine, context.Context) error) []error {
	t.Helper()
	return inprocWorld(t, 2, 1, func(r int, main Comm, _ []Comm) error {
		m, err := model.NewMLP(dev(), model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}, Compute: tensor.F16}, 3)
		if err != nil {
			return err
		}
		defer m.Free()
		eng := New(m.Params(), main, opts)
		defer eng.Close()
		if refusal(eng) == nil {
			return errors.New("the refusal: nil")
		}
		return use(eng, context.Background())
	})
}

// failingMirrorCPU is mirrorStagingCPU whose rank fail cannot export its tensor (stage "export")
// or open its peers' handles (stage "connect"), as a driver refusing CUDA IPC would.
type failingMirrorCPU struct {
	mirrorStagingCPU
	fail  int
	stage string
}

func (d failingMirrorCPU) NewPeerMirror(t *tensor.Tensor, rank, size int) (tensor.PeerMirror, error) {
	if rank == d.fail && d.stage == "export" {
		return nil, fmt.Errorf("rank %d's driver: no IPC handle", rank)
	}
	m, err := d.mirrorStagingCPU.NewPeerMirror(t, rank, size)
	if err != nil || rank != d.fail {
		return m, err
	}
	return failingConnect{m.(*cpuMirror)}, nil
}

type failingConnect struct{ *cpuMirror }

func (m failingConnect) Connect([][]byte) error {
	return fmt.Errorf("rank %d's driver: cannot open a peer's handle", m.rank)
}

// A device that cannot export or map the peers' memory on one rank fails UsePeerGather on every
// rank alike, each error wrapping ErrPeerSetup and naming the rank that could not (so
// ddp.shard_gather: auto keeps the host ring on all of them), and no engine is left gathering
// from its peers; a refusal of the configuration is not ErrPeerSetup.
func TestUsePeerGather_deviceFailureAgreed(t *testing.T) {
	for _, stage := range []string{"export", "connect"} {
		t.Run(stage, func(t *testing.T) {
			hub := newMirrorHub()
			checkSetupFailureAgreed(t, true, func(int) tensor.Device {
				return failingMirrorCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, hub}, 1, stage}
			}, (*Engine).PeerGatherRefusal, (*Engine).UsePeerGather, (*Engine).PeerGather, "gathers from its peers")
		})
	}
	errs := inprocWorld(t, 2, 1, func(r int, main Comm, _ []Comm) error {
		m, err := model.NewMLP(cpu.New(), model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}, Compute: tensor.F16}, 3)
		if err != nil {
			return err
		}
		defer m.Free()
		eng := New(m.Params(), main, Options{BucketCapMB: 0.01, Wire: allreduce.WireF16, ShardOptimizer: true})
		defer eng.Close()
		if eng.PeerGatherRefusal() == nil {
			return errors.New("PeerGatherRefusal: nil off the staged path")
		}
		return eng.UsePeerGather(context.Background())
	})
	for r, err := range errs {
		if err == nil || errors.Is(err, ErrPeerSetup) {
			t.Errorf("rank %d, the CPU path: %v; want a refusal that is not ErrPeerSetup", r, err)
		}
	}
}

// checkSetupFailureAgreed runs a world of 3 engines (sharded or not) on newDev's devices (rank 1's
// failing its device's setup), asks each for use after refusal says it would try, and checks that
// every rank fails with one line wrapping ErrPeerSetup and naming rank 1, and none is left on the
// devices (on: the engine's report; what: what it would be doing, for the message).
func checkSetupFailureAgreed(t *testing.T, shard bool, newDev func(rank int) tensor.Device, refusal func(*Engine) error,
	use func(*Engine, context.Context) error, on func(*Engine) bool, what string) {
	t.Helper()
	type res struct {
		err error
		on  bool
	}
	out := inprocWorld(t, 3, 1, func(r int, main Comm, _ []Comm) res {
		m, err := model.NewMLP(newDev(r), model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}, Compute: tensor.F16}, 3)
		if err != nil {
			return res{err: err}
		}
		defer m.Free()
		eng := New(m.Params(), main, Options{BucketCapMB: 0.01, Wire: allreduce.WireF16, ShardOptimizer: shard})
		defer eng.Close()
		if err := refusal(eng); err != nil {
			return res{err: fmt.Errorf("refused before trying: %w", err)}
		}
		err = use(eng, context.Background())
		return res{err, on(eng)}
	})
	for r, o := range out {
		if o.err == nil || !errors.Is(o.err, ErrPeerSetup) || !strings.Contains(o.err.Error(), "rank 1") || strings.Contains(o.err.Error(), "\n") {
			t.Errorf("rank %d: %v; want one line wrapping ErrPeerSetup and naming rank 1", r, o.err)
		}
		if o.on {
			t.Errorf("rank %d %s after a failed setup", r, what)
		}
	}
}
