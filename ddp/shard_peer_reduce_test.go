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

// ddp.shard_reduce: device (shard_peer_reduce.go) on the CPU: peerStagingCPU is mirrorStagingCPU
// whose staging plans also have tensor.PeerShardStaging and tensor.PeerGradStaging, as the CUDA
// device's have them: the plans of one world register in a hub, and ReduceRange copies the peers'
// ranges out of their f16 buffers at once (the CPU device's stream is the calling goroutine) and
// sums them with the ring's arithmetic (allreduce.SumF16, which allreduce's tests hold to the
// ring); GatherRanges (ddp.intra_host: copies, engine_peer.go) copies the peers' summed segments
// at once.

type stagingHub struct {
	mu      sync.Mutex
	plans   map[int]*cpuPeerStaging
	copies  map[int]int // per rank: ranges copied out of a peer's buffer for a sum
	reduces map[int]int // per rank: ReduceRange calls
	host    map[int]int // per rank: Stage or Host calls (the pinned path's; want none)
	gathers map[int]int // per rank: summed segments copied out of a peer's buffer (GatherRanges)
	freed   map[int]int // per rank: ReleaseHost calls (the pinned buffer freed under copies)
}

func newStagingHub() *stagingHub {
	return &stagingHub{plans: map[int]*cpuPeerStaging{}, copies: map[int]int{}, reduces: map[int]int{}, host: map[int]int{}, gathers: map[int]int{}, freed: map[int]int{}}
}

func (h *stagingHub) count(m map[int]int, rank int) {
	h.mu.Lock()
	m[rank]++
	h.mu.Unlock()
}

type peerStagingCPU struct {
	mirrorStagingCPU
	stg *stagingHub
}

func (d peerStagingCPU) NewGradStaging(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
	base, err := d.shardStagingCPU.NewGradStaging(grad, ranges)
	if err != nil {
		return nil, err
	}
	return &cpuPeerStaging{cpuShardStaging: base.(*cpuShardStaging), hub: d.stg, rank: -1}, nil
}

// cpuPeerStaging adds tensor.PeerShardStaging to cpuShardStaging; cpuPeerLink is its PeerMirror.
type cpuPeerStaging struct {
	*cpuShardStaging
	hub        *stagingHub
	rank, size int
	peers      []*cpuPeerStaging
	// scratch is the plan's one copy of its peers' ranges, as the CUDA plan's device scratch: the
	// engine's channels call ReduceRange at once, so mu serialises its use as the CUDA plan's
	// does (without it the race detector fires: the contract's "one call at a time" is needed).
	mu      sync.Mutex
	scratch [][]uint16
	freed   bool // ReleaseHost: the pinned path's methods panic after it, as the CUDA plan's would fault
}

var (
	_ tensor.PeerGradStaging = (*cpuPeerStaging)(nil)
	_ tensor.PeerMirror      = cpuPeerLink{}
)

func (s *cpuPeerStaging) NewPeerReduce(rank, size int) (tensor.PeerMirror, error) {
	s.rank, s.size = rank, size
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.plans[rank] = s
	return cpuPeerLink{s}, nil
}

type cpuPeerLink struct{ *cpuPeerStaging }

func (s cpuPeerLink) Handle() []byte { return []byte(fmt.Sprint(s.rank)) }

func (s cpuPeerLink) Connect(handles [][]byte) error {
	if len(handles) != s.size {
		return fmt.Errorf("%d handles for %d ranks", len(handles), s.size)
	}
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	for q, h := range handles {
		p := s.hub.plans[q]
		if string(h) != fmt.Sprint(q) || p == nil || fmt.Sprint(p.ranges) != fmt.Sprint(s.ranges) {
			return fmt.Errorf("rank %d's handle %q: no plan like rank %d's", q, h, s.rank)
		}
		s.peers = append(s.peers, p)
	}
	return nil
}

func (s cpuPeerLink) Pull(peer, lo, hi int) { panic("cpuPeerLink: Pull is not used by ddp") }

func (s cpuPeerLink) Close() error { return nil }

// Stage and Host are the pinned path's: counted, as none should come, and refused once the
// pinned buffer is freed.
func (s *cpuPeerStaging) Stage(i int, scale float32) {
	s.hub.count(s.hub.host, s.rank)
	s.checkHost("Stage")
	s.cpuStaging.Stage(i, scale)
}

func (s *cpuPeerStaging) Host(i int) []uint16 {
	s.hub.count(s.hub.host, s.rank)
	s.checkHost("Host")
	return s.cpuStaging.Host(i)
}

func (s *cpuPeerStaging) checkHost(op string) {
	if s.freed {
		panic(fmt.Sprintf("cpuPeerStaging: rank %d: %s after ReleaseHost", s.rank, op))
	}
}

func (s *cpuPeerStaging) ReleaseHost() {
	s.freed = true
	s.hub.count(s.hub.freed, s.rank)
}

func (s *cpuPeerStaging) StageDevice(i int, scale float32) { s.cpuStaging.Stage(i, scale) }
func (s *cpuPeerStaging) WaitStaged(i int)                 { <-s.ready[i] }

func (s *cpuPeerStaging) ReduceRange(i, lo, hi int, order []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.scratch) != len(order) {
		s.scratch = make([][]uint16, len(order))
	}
	parts := make([][]uint16, len(order))
	for k, q := range order {
		if q == s.rank {
			parts[k] = s.half[i][lo:hi]
			continue
		}
		s.scratch[k] = append(s.scratch[k][:0], s.peers[q].half[i][lo:hi]...) // the copy into scratch
		parts[k] = s.scratch[k]
		s.hub.count(s.hub.copies, s.rank)
	}
	vals := make([]uint16, len(order))
	for j := range hi - lo {
		for k := range parts {
			vals[k] = parts[k][j]
		}
		s.half[i][lo+j] = allreduce.SumF16(vals)
	}
	s.hub.count(s.hub.reduces, s.rank)
	s.ReturnRange(i, lo, hi) // Finish widens the owned range
}

func (s *cpuPeerStaging) WaitReduced(int) {} // ReduceRange summed at once

func (s *cpuPeerStaging) GatherRanges(i int, segs [][2]int) {
	for q, sg := range segs {
		if q == s.rank || sg[1] == sg[0] {
			continue
		}
		copy(s.half[i][sg[0]:sg[1]], s.peers[q].half[i][sg[0]:sg[1]])
		s.hub.count(s.hub.gathers, s.rank)
	}
	s.Return(i) // Finish widens the whole bucket
}

// The sharded step with ddp.shard_reduce: device ends with the very weights (param_sha256, the
// f16 copy, m and v) of the unsharded run, at W = 2 and 4, with accumulation, clipping, a skipped
// step and two channels, with and without ddp.overlap_gather, ddp.shard_master and ddp.shard_gather:
// device; every rank copied W−1 ranges a bucket and step from its peers (the hub counts them), and
// nothing went through the pinned path (Stage, Host).
func TestShardStaged_peerReduceBitIdentical(t *testing.T) {
	runPeerReduce(t, func(hub *stagingHub) newDevFunc {
		return func(t *testing.T, rank int) (tensor.Device, func()) {
			return peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHubFor(hub)}, hub}, func() {}
		}
	})
}

// mirrorHubs gives every world's staging hub one mirror hub (the f16 weights' mirrors).
var mirrorHubs sync.Map // *stagingHub → *mirrorHub

func newMirrorHubFor(h *stagingHub) *mirrorHub {
	v, _ := mirrorHubs.LoadOrStore(h, newMirrorHub())
	return v.(*mirrorHub)
}

// runPeerReduce is the test above with the devices newDev makes (hub: the CPU stand-in's, which
// counts the copies; a real device's leaves it empty, and the counts are not checked).
func runPeerReduce(t *testing.T, newDev func(hub *stagingHub) newDevFunc) {
	for _, W := range []int{2, 4} {
		for _, v := range []struct{ overlap, master, gather bool }{{false, false, false}, {true, false, true}, {true, true, true}, {false, true, false}} {
			name := fmt.Sprintf("W%d/overlap=%v/shard_master=%v/shard_gather_device=%v", W, v.overlap, v.master, v.gather)
			t.Run(name, func(t *testing.T) {
				b, k, steps := 3, 2, 6
				d := makeData(W * b * k * steps)
				hub := newStagingHub()
				sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16, bucketMB: 0.0005,
					clip: 0.5, channels: 2, injectRank: 1, injectStep: 3, newDev: newDev(hub)}
				plain := runShardWorld(t, sc, d)
				sc.shard, sc.overlap, sc.shardMaster, sc.peerGather, sc.peerReduce = true, v.overlap, v.master, v.gather, true
				sharded := runShardWorld(t, sc, d)
				checkSame(t, plain, sharded)
				if v.master {
					checkMasterShard(t, plain, sharded)
				}
				for r := range sharded {
					if !sharded[r].staged || sharded[r].skipped != 1 {
						t.Errorf("rank %d: staged %v, skipped %d: want the staged path and one skipped step", r, sharded[r].staged, sharded[r].skipped)
					}
					if len(hub.reduces) == 0 {
						continue // a real device: not counted
					}
					if n := hub.reduces[r]; n == 0 || n%steps != 0 || hub.copies[r] != (W-1)*n || hub.host[r] != 0 {
						t.Errorf("rank %d: %d reductions, %d copies from its peers, %d through pinned memory: want a positive multiple of %d steps, W−1 = %d copies each, none pinned",
							r, n, hub.copies[r], hub.host[r], steps, W-1)
					}
				}
			})
		}
	}
}

// UsePeerReduce refuses, on every rank and naming the key and the rank, where the gradients are
// not reduce-scattered on the sharded staged path: unsharded, sharded on the CPU device's own path
// (no staging), and on a staging plan that cannot map its peers'; none of these is ErrPeerSetup.
func TestUsePeerReduce_refused(t *testing.T) {
	for _, c := range []struct {
		name  string
		shard bool
		dev   func() tensor.Device
		want  string
	}{
		{"unsharded", false, func() tensor.Device {
			return peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()}, newStagingHub()}
		}, "needs ddp.shard_optimizer"},
		{"cpu path", true, func() tensor.Device { return cpu.New() }, "needs the sharded staged path"},
		{"no peer staging", true, func() tensor.Device { return mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()} }, "cannot map its peers' staging buffers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := useOnTwoRanks(t, c.dev, Options{BucketCapMB: 0.01, Wire: allreduce.WireF16, ShardOptimizer: c.shard},
				(*Engine).PeerReduceRefusal, (*Engine).UsePeerReduce)
			for r, err := range errs {
				if err == nil || errors.Is(err, ErrPeerSetup) || !strings.Contains(err.Error(), "ddp.shard_reduce") || !strings.Contains(err.Error(), c.want) ||
					!strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) || strings.Contains(err.Error(), "\n") {
					t.Errorf("rank %d: %v; want one line naming ddp.shard_reduce, the rank and %q, not ErrPeerSetup", r, err, c.want)
				}
			}
		})
	}
}

// failingPeerStaging is peerStagingCPU whose rank 1 cannot open its peers' staging buffers.
type failingPeerStaging struct{ peerStagingCPU }

func (d failingPeerStaging) NewGradStaging(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
	s, err := d.peerStagingCPU.NewGradStaging(grad, ranges)
	if err != nil {
		return nil, err
	}
	return &failingPeerConnect{s.(*cpuPeerStaging)}, nil
}

type failingPeerConnect struct{ *cpuPeerStaging }

func (s *failingPeerConnect) NewPeerReduce(rank, size int) (tensor.PeerMirror, error) {
	m, err := s.cpuPeerStaging.NewPeerReduce(rank, size)
	if err != nil || rank != 1 {
		return m, err
	}
	return failingLink{m.(cpuPeerLink)}, nil
}

type failingLink struct{ cpuPeerLink }

func (s failingLink) Connect([][]byte) error {
	return fmt.Errorf("rank %d's driver: cannot open a peer's handle", s.rank)
}

// A plan that cannot map its peers' buffers on one rank fails UsePeerReduce on every rank alike,
// wrapping ErrPeerSetup and naming that rank, and no engine is left reducing on the devices.
func TestUsePeerReduce_deviceFailureAgreed(t *testing.T) {
	hub := newStagingHub()
	checkSetupFailureAgreed(t, true, func(int) tensor.Device {
		return failingPeerStaging{peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()}, hub}}
	}, (*Engine).PeerReduceRefusal, (*Engine).UsePeerReduce, (*Engine).PeerReduce, "reduces on the devices")
}

// Steps of backward and Wait alone, no other collective between them (no norm, no gather, no
// check): the race detector sees every rank's copies out of its peers' buffers ordered before
// those peers cast the next step's buckets over them — by Wait's meeting (peerReduceMeet)
// alone. Without it the copies of each channel's last bucket race the next step's cast.
func TestPeerReduce_nextCastAfterCopies(t *testing.T) {
	hub := backwardWaitOnly(t, 3, true, (*Engine).UsePeerReduce)
	for r := range 3 {
		if hub.reduces[r] == 0 {
			t.Errorf("rank %d reduced nothing on the devices", r)
		}
	}
}

// backwardWaitOnly runs W ranks (two channels, sharded or not) of the CPU stand-in through 4
// steps of backward and Wait alone, after use (UsePeerReduce or UsePeerCopies) on every rank,
// and returns their hub.
func backwardWaitOnly(t *testing.T, W int, shard bool, use func(*Engine, context.Context) error) *stagingHub {
	t.Helper()
	const steps = 4
	hub := newStagingHub()
	d := makeData(W * 3 * steps)
	inprocWorld(t, W, 2, func(r int, main Comm, extra []Comm) error {
		dev := peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()}, hub}
		m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nClass}, Compute: tensor.F16}, 3)
		if err != nil {
			t.Error(err)
			return err
		}
		defer m.Free()
		eng := New(m.Params(), main, Options{BucketCapMB: 0.0005, Wire: allreduce.WireF16, Channels: extra, ShardOptimizer: shard})
		defer eng.Close()
		ctx := context.Background()
		if err := use(eng, ctx); err != nil {
			t.Error(err)
			return err
		}
		x := dev.Alloc(tensor.F32, "x", 3, nFeat)
		y := dev.Alloc(tensor.I32, "y", 3)
		defer dev.Free(x)
		defer dev.Free(y)
		for s := range steps {
			lo := (s*W + r) * 3
			dev.Upload(x, d.x[lo*nFeat:(lo+3)*nFeat])
			dev.UploadI32(y, d.y[lo:lo+3])
			m.Forward(model.Inputs{X: x, Targets: y, Valid: 3}, true)
			eng.BeginMicro(0, 1)
			m.Backward(1)
			if err := eng.Wait(ctx); err != nil {
				t.Errorf("rank %d step %d: %v", r, s, err)
				return err
			}
		}
		return nil
	})
	return hub
}
