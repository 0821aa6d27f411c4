package ddp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// ddp.intra_host: copies (engine_peer.go) on the CPU stand-in of shard_peer_reduce_test.go
// (peerStagingCPU: its plans have tensor.PeerGradStaging).

func peerStagingDev(hub *stagingHub) newDevFunc {
	return func(t *testing.T, rank int) (tensor.Device, func()) {
		return peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHubFor(hub)}, hub}, func() {}
	}
}

// One syncing step (twice: the buffers reused) averages to the host ring's AllReduceF16 bit for
// bit on every rank, at W = 2, 3 and 4, over parameters of odd sizes (buckets whose length W
// does not divide, one of 2 elements: smaller than W at 3 and 4, so some ranks own an empty
// segment); every rank summed each bucket once and copied each non-empty peer segment once a
// step, and nothing went through pinned memory.
func TestPeerCopies_bitIdenticalToHostRing(t *testing.T) {
	runPeerCopiesAverage(t, []int{2, 3, 4}, peerStagingDev)
}

// runPeerCopiesAverage is the test above on newDev's devices at each W of Ws (hub: the CPU
// stand-in's, which counts the sums and copies; a real device's leaves it empty, and the counts
// are not checked).
func runPeerCopiesAverage(t *testing.T, Ws []int, newDev func(hub *stagingHub) newDevFunc) {
	for _, W := range Ws {
		t.Run(fmt.Sprint("W", W), func(t *testing.T) {
			var ringLog, copiesLog bytes.Buffer // each rank's Info lines (slog's handler serialises the writes)
			opts := Options{BucketCapMB: 0.01, Wire: allreduce.WireF16, Logger: slog.New(slog.NewTextHandler(&ringLog, nil))}
			ring, on := averageWith(t, W, stagingSizes, newDev(newStagingHub()), opts, nil)
			for r, ok := range on {
				if !ok {
					t.Fatalf("rank %d: the host ring run is not on the staged path", r)
				}
			}
			// The staged path's line about pinned memory: once a rank on the host ring, never
			// under copies (logged at the first micro-step, after UsePeerCopies).
			const pinnedLine = "gradients leave the device as f16 through pinned memory"
			if n := strings.Count(ringLog.String(), pinnedLine); n != W {
				t.Errorf("the host ring's run logged %q %d times, want once a rank (%d):\n%s", pinnedLine, n, W, ringLog.String())
			}
			opts.Logger = slog.New(slog.NewTextHandler(&copiesLog, nil))
			hub := newStagingHub()
			var lens []int // the buckets' lengths, from rank 0's engine
			copies, _ := averageWith(t, W, stagingSizes, newDev(hub), opts, func(e *Engine) error {
				if err := e.UsePeerCopies(context.Background()); err != nil || !e.PeerCopies() {
					return fmt.Errorf("UsePeerCopies: %v (copies %v)", err, e.PeerCopies())
				}
				if pcie, ring := e.BytesPerStep(); pcie != 0 || ring != 0 {
					return fmt.Errorf("BytesPerStep: pcie %d, ring %d; want none", pcie, ring)
				}
				if pinned, _ := e.StagingBytes(); pinned != 0 { // the CUDA plan's freed (ReleaseHost)
					return fmt.Errorf("StagingBytes: %d pinned; want none", pinned)
				}
				if e.comm.Rank() == 0 {
					for _, b := range e.buckets {
						lens = append(lens, b.hi-b.lo)
					}
				}
				return nil
			})
			if t.Failed() {
				return
			}
			if strings.Contains(copiesLog.String(), pinnedLine) {
				t.Errorf("the copies run logged %q:\n%s", pinnedLine, copiesLog.String())
			}
			for r := range W {
				for i := range ring[0] {
					if math.Float32bits(copies[r][i]) != math.Float32bits(ring[0][i]) {
						t.Fatalf("rank %d gradient %d: %g by copies, %g by the host ring", r, i, copies[r][i], ring[0][i])
					}
				}
			}
			if W > 2 && slices.Min(lens) >= W {
				t.Fatalf("buckets %v: none smaller than W = %d", lens, W)
			}
			if len(hub.reduces) == 0 {
				return // a real device: not counted
			}
			const steps = 2
			for r := range W {
				gathers := 0 // the peers' non-empty segments, all buckets
				for _, n := range lens {
					for q := range W {
						if lo, hi := allreduce.Segment(n, W, q); hi > lo && q != r {
							gathers++
						}
					}
				}
				if hub.reduces[r] != steps*len(lens) || hub.gathers[r] != steps*gathers || hub.host[r] != 0 || hub.freed[r] != 1 {
					t.Errorf("rank %d: %d sums, %d segments gathered from its peers, %d through pinned memory, pinned buffer freed %d times; want %d, %d, none, once",
						r, hub.reduces[r], hub.gathers[r], hub.host[r], hub.freed[r], steps*len(lens), steps*gathers)
				}
			}
		})
	}
}

// runPeerCopies trains the same fp16 MLP unsharded on the staged path, its f16 gradients
// all-reduced by the host ring and then by copies between the devices (UsePeerCopies), at each W
// of Ws, with accumulation, clipping, a skipped step and two channels: every rank ends with the
// very weights (param_sha256, the f16 copy), norms, m and v of the host ring's run (hub: the CPU
// stand-in's, which counts what went through pinned memory; a real device's leaves it empty).
func runPeerCopies(t *testing.T, Ws []int, newDev func(hub *stagingHub) newDevFunc) {
	for _, W := range Ws {
		t.Run(fmt.Sprint("W", W), func(t *testing.T) {
			b, k, steps := 3, 2, 6
			d := makeData(W * b * k * steps)
			sc := shardCfg{W: W, b: b, k: k, steps: steps, compute: tensor.F16, wire: allreduce.WireF16, bucketMB: 0.0005,
				clip: 0.5, channels: 2, injectRank: 1, injectStep: 3, newDev: newDev(newStagingHub())}
			ring := runShardWorld(t, sc, d)
			hub := newStagingHub()
			sc.newDev, sc.peerCopies = newDev(hub), true
			copies := runShardWorld(t, sc, d)
			checkSameTraining(t, ring, copies)
			for r := range copies {
				if !copies[r].staged || copies[r].skipped != 1 {
					t.Errorf("rank %d: staged %v, skipped %d: want the staged path and one skipped step", r, copies[r].staged, copies[r].skipped)
				}
				if len(hub.reduces) > 0 && (hub.reduces[r] == 0 || hub.gathers[r] == 0 || hub.host[r] != 0) {
					t.Errorf("rank %d: %d sums, %d segments gathered, %d through pinned memory: want sums and gathers, none pinned", r, hub.reduces[r], hub.gathers[r], hub.host[r])
				}
			}
		})
	}
}

func TestPeerCopies_trainsBitIdentical(t *testing.T) {
	runPeerCopies(t, []int{2, 3, 4}, peerStagingDev)
}

// Steps of backward and Wait alone under the race detector (backwardWaitOnly): every rank's copy
// of a peer's summed segment comes after that peer's sum (the second meeting, gatherPeer's), its
// overwrite of a segment of its own buffer after the owner copied it out for its sum (the same
// meeting), and its next cast after its peers' copies out of its buffer (Wait's meeting). Without
// either meeting a copy races a peer's write.
func TestPeerCopies_meetingsOrderTheCopies(t *testing.T) {
	hub := backwardWaitOnly(t, 3, false, (*Engine).UsePeerCopies)
	for r := range 3 {
		if hub.reduces[r] == 0 || hub.gathers[r] == 0 {
			t.Errorf("rank %d: %d sums, %d segments gathered on the devices", r, hub.reduces[r], hub.gathers[r])
		}
	}
}

// UsePeerCopies refuses, on every rank and naming the key and the rank, where the gradients are
// not all-reduced on the unsharded staged path with the f16 wire: sharded, on the CPU device's
// own path (no staging), on the bf16 wire, and on a staging plan that cannot map its peers';
// none of these is ErrPeerSetup.
func TestUsePeerCopies_refused(t *testing.T) {
	peer := func() tensor.Device {
		return peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()}, newStagingHub()}
	}
	for _, c := range []struct {
		name  string
		shard bool
		wire  allreduce.Wire
		dev   func() tensor.Device
		want  string
	}{
		{"sharded", true, allreduce.WireF16, peer, "with ddp.shard_optimizer"},
		{"cpu path", false, allreduce.WireF16, func() tensor.Device { return cpu.New() }, "needs the staged path with the f16 wire"},
		{"bf16 wire", false, allreduce.WireBF16, func() tensor.Device { return wireStagingCPU{stagingCPU{cpu.New()}} }, "needs the staged path with the f16 wire"},
		{"no peer staging", false, allreduce.WireF16, func() tensor.Device { return stagingCPU{cpu.New()} }, "cannot map its peers' staging buffers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := useOnTwoRanks(t, c.dev, Options{BucketCapMB: 0.01, Wire: c.wire, ShardOptimizer: c.shard},
				(*Engine).PeerCopiesRefusal, (*Engine).UsePeerCopies)
			for r, err := range errs {
				if err == nil || errors.Is(err, ErrPeerSetup) || !strings.Contains(err.Error(), "ddp.intra_host: copies") || !strings.Contains(err.Error(), c.want) ||
					!strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) || strings.Contains(err.Error(), "\n") {
					t.Errorf("rank %d: %v; want one line naming ddp.intra_host: copies, the rank and %q, not ErrPeerSetup", r, err, c.want)
				}
			}
		})
	}
}

// A plan that cannot map its peers' buffers on one rank fails UsePeerCopies on every rank alike,
// wrapping ErrPeerSetup and naming that rank, and no engine is left all-reducing by copies.
func TestUsePeerCopies_deviceFailureAgreed(t *testing.T) {
	hub := newStagingHub()
	checkSetupFailureAgreed(t, false, func(int) tensor.Device {
		return failingPeerStaging{peerStagingCPU{mirrorStagingCPU{shardStagingCPU{cpu.New()}, newMirrorHub()}, hub}}
	}, (*Engine).PeerCopiesRefusal, (*Engine).UsePeerCopies, (*Engine).PeerCopies, "all-reduces by copies")
}
