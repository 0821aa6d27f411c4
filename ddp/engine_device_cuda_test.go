//go:build cuda

package ddp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
)

// The device path (ddp.intra_host: device) on the GPU: every rank is a goroutine with its own
// CUDA device on GPU 0 (the ranks share the GPU, as two or four workers of ddplaunch would),
// talking over the in-process transport; the IPC all-reduce runs on each rank's side stream.

// trainGPTDevice trains a small GPT for steps steps on rank's share of a fixed token stream,
// on the device path or the host path, and returns the final param_sha256 and rank 0's losses.
// stopAt ≥ 0: the rank stops before that step. hold, when set, runs before the engine closes,
// however the run ends: in one process a peer's kernel may still address this rank's buffers,
// so the fault test keeps every rank's open until all have returned.
func trainGPTDevice(t *testing.T, rank, W int, comm Comm, steps int, wire allreduce.Wire, device bool, stopAt int, hold func()) (string, []float64, error) {
	path := "host"
	if device {
		path = "device"
	}
	return trainGPTDeviceKill(t, rank, W, comm, steps, wire, path, stopAt, -1, hold)
}

// trainGPTDeviceKill is trainGPTDevice on path ("host", "device": UseDevice, or "copies":
// UsePeerCopies, the staged path's f16 all-reduce by copies between the devices) whose process
// kills itself (SIGKILL) at step killAt ≥ 0, after backward has launched the step's all-reduces:
// a rank killed mid-collective.
func trainGPTDeviceKill(t *testing.T, rank, W int, comm Comm, steps int, wire allreduce.Wire, path string, stopAt, killAt int, hold func()) (string, []float64, error) {
	dev, err := cuda.New(0)
	if err != nil {
		t.Fatalf("rank %d: cuda.New(0): %v", rank, err)
	}
	defer dev.Close()
	cfg := model.GPTConfig{Layers: 2, Width: 64, Heads: 4, Context: 32, Vocab: 97, Tied: true, Compute: tensor.F32}
	m, err := model.NewGPT(dev, cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	opt, err := model.NewSGD(ps, model.SGDConfig{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	eng := New(ps, comm, Options{BucketCapMB: 0.05, Wire: wire, HostStaging: path == "host"}) // copies: the staged path
	defer eng.Close()
	if hold != nil {
		defer hold()
	}
	ctx := context.Background()
	switch path {
	case "device":
		if err := eng.UseDevice(ctx, 1); err != nil {
			return "", nil, err
		}
	case "copies":
		if err := eng.UsePeerCopies(ctx); err != nil {
			return "", nil, err
		}
	}
	if err := eng.BroadcastParams(ctx); err != nil {
		return "", nil, err
	}
	const B, T = 4, 32
	x, y := dev.Alloc(tensor.I32, "tokens", B, T), dev.Alloc(tensor.I32, "targets", B, T)
	defer dev.Free(x)
	defer dev.Free(y)
	tok, tg := make([]int32, B*T), make([]int32, B*T)
	lh := []float32{0}
	var losses []float64
	for s := 0; s < steps; s++ {
		if s == stopAt {
			return "", losses, nil
		}
		r := rand.New(rand.NewPCG(uint64(s), uint64(rank)))
		for i := range tok {
			tok[i] = int32(r.IntN(cfg.Vocab))
			tg[i] = int32((int(tok[i])*7 + 3) % cfg.Vocab)
		}
		dev.UploadI32(x, tok)
		dev.UploadI32(y, tg)
		ps.ZeroGrad()
		l := m.Forward(model.Inputs{Tokens: x, Targets: y, Valid: B * T, Seed: uint64(s*W + rank)}, true)
		dev.Download(lh, l)
		eng.BeginMicro(0, 1)
		eng.BeginBackward()
		m.Backward(1)
		eng.EndBackwardAt(dev.Fence())
		if s == killAt {
			dev.Sync() // the launches are on the GPU, the peers' kernels meeting this rank's
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err := eng.Wait(ctx); err != nil {
			return "", losses, fmt.Errorf("rank %d step %d: %w", rank, s, err)
		}
		opt.Step(0.05)
		lv := []float32{lh[0]}
		if err := comm.AllReduce(ctx, lv, allreduce.Avg, allreduce.WireF32); err != nil {
			return "", losses, err
		}
		losses = append(losses, float64(lv[0]))
	}
	h, err := eng.CheckReplicas(ctx, steps)
	return h, losses, err
}

// Two and four ranks sharing the GPU train the GPT with ddp.intra_host: device: the same
// param_sha256 on every rank, and the loss curve within the wire's tolerance of the host path's.
func TestCUDADevice_trainsGPTLikeHostPath(t *testing.T) {
	const steps = 6
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16, allreduce.WireBF16} {
		if wire == allreduce.WireBF16 {
			d, err := cuda.New(0)
			if err != nil {
				t.Fatal(err)
			}
			err = tensor.CheckCompute(d, tensor.BF16)
			d.Close()
			if err != nil {
				t.Logf("bf16 wire skipped: %v", err)
				continue
			}
		}
		for _, W := range []int{2, 4} {
			run := func(device bool) []trainOut {
				return trainEachRank(t, W, fmt.Sprintf("wire %s W=%d device %v", wire, W, device), func(r int, g *allreduce.Group) (string, []float64, error) {
					return trainGPTDevice(t, r, W, g, steps, wire, device, -1, nil)
				})
			}
			// The host path first: it loads every kernel the step uses (cuBLAS's among them) into
			// the context the goroutine ranks share, while no IPC kernel spins; a first use on the
			// device path could otherwise load one while a peer's all-reduce spins for this rank
			// (main_cuda_test.go).
			host := run(false)
			tol := map[allreduce.Wire]float64{allreduce.WireF32: 1e-5, allreduce.WireF16: 2e-3, allreduce.WireBF16: 2e-2}[wire]
			ipcWaits(t, func(t *testing.T) {
				dev := run(true)
				if t.Failed() {
					return
				}
				checkDeviceLikeHost(t, wire, W, dev, host, tol)
			})
		}
	}
}

// A rank that stops mid-run (its control-plane links close; its kernels never come) makes the
// others' steps fail within 15 s naming it, and no rank hangs on a device wait.
func TestCUDADevice_stoppedRankNamedWithin15s(t *testing.T) { ipcWaits(t, testStoppedRankNamed) }

func testStoppedRankNamed(t *testing.T) {
	const W, dead = 3, 2
	errs := make([]error, W)
	returned := make([]time.Time, W)
	var stopped time.Time
	var all sync.WaitGroup // every rank's engine stays open until all have returned
	all.Add(W)
	hold := func() {
		all.Done()
		done := make(chan struct{})
		go func() { all.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("a rank did not return within 60 s: a device wait hangs")
		}
	}
	eachRank(t, W, func(r int, g *allreduce.Group) {
		if r == dead {
			trainGPTDevice(t, r, W, g, 6, allreduce.WireF16, true, 2, func() {
				stopped = time.Now()
				g.Close() // the process is gone: its control-plane links close
				hold()
			})
			return
		}
		_, _, errs[r] = trainGPTDevice(t, r, W, g, 6, allreduce.WireF16, true, -1, func() {
			returned[r] = time.Now()
			hold()
		})
	})
	for r, err := range errs {
		if r == dead {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", dead)) {
			t.Errorf("rank %d: got %v, want an error naming rank %d", r, err, dead)
		}
		if d := returned[r].Sub(stopped); d > 15*time.Second {
			t.Errorf("rank %d failed %s after rank %d stopped, want within 15 s", r, d, dead)
		}
	}
}

// Three processes sharing GPU 0 on the device path (handles opened with cuIpcOpenMemHandle);
// rank 2 kills itself (SIGKILL) in step 2 after its all-reduces are launched. The other two must
// exit within 15 s of its death with an error naming rank 2; none may hang on a device wait. The
// test binary runs itself as the ranks.
func TestCUDADevice_killedProcessNamedWithin15s(t *testing.T) {
	killedRankTest(t, "device", "GODDP_DEVICE_TEST_RANK", "device-test", "TestCUDADevice_killedProcessNamedWithin15s", ipcWaits)
}

// The same with ddp.intra_host: copies (engine_peer.go: the peers' staging buffers opened with
// cuIpcOpenMemHandle, the ranks meeting on the host twice a bucket): rank 2 kills itself in step 2
// after backward has launched its casts; the other two exit within 15 s naming rank 2 — no copy
// or event wait hangs on a dead peer. Passed on an H100 in session 22.
func TestCUDAPeerCopies_killedProcessNamedWithin15s(t *testing.T) {
	killedRankTest(t, "copies", "GODDP_COPIES_TEST_RANK", "copies-test", "TestCUDAPeerCopies_killedProcessNamedWithin15s",
		func(t *testing.T, f func(*testing.T)) { f(t) })
}

// killedRankTest is the kill tests' body: in a rank process (rankVar set) it trains on path with
// rank 2 of 3 killing itself in step 2 and prints its result; in the test itself it runs the
// test binary (name) as the three ranks, inside each (ipcWaits for the device path's two waits),
// and checks the survivors (checkKilledRankNamed).
func killedRankTest(t *testing.T, path, rankVar, token, name string, each func(*testing.T, func(*testing.T))) {
	const W, dead = 3, 2
	if rank := os.Getenv(rankVar); rank != "" {
		g := rankGroupFromEnv(t)
		kill := -1
		if g.Rank() == dead {
			kill = 2
		}
		_, _, err := trainGPTDeviceKill(t, g.Rank(), W, g, 6, allreduce.WireF16, path, -1, kill, nil)
		fmt.Printf("DEVICE-RESULT rank %d: %v\n", g.Rank(), err)
		return
	}
	each(t, func(t *testing.T) {
		outs, _, ended := runSelfAsRanks(t, W, rankVar, token, name)
		checkKilledRankNamed(t, outs, ended, dead)
	})
}

// checkKilledRankNamed checks the ranks' outputs of a kill test: every rank but dead printed a
// DEVICE-RESULT line with an error naming rank dead, and exited within 15 s of its death.
func checkKilledRankNamed(t *testing.T, outs []string, ended []time.Time, dead int) {
	t.Helper()
	for r := range outs {
		if r == dead {
			continue
		}
		i := strings.Index(outs[r], "DEVICE-RESULT ")
		if i < 0 {
			t.Fatalf("rank %d printed no result (killed by the 2-minute bound: a hang?):\n%s", r, outs[r])
		}
		line := strings.SplitN(outs[r][i:], "\n", 2)[0]
		if !strings.Contains(line, fmt.Sprintf("rank %d", dead)) || strings.HasSuffix(line, "<nil>") {
			t.Errorf("rank %d: %s — want an error naming rank %d", r, line, dead)
		}
		if d := ended[r].Sub(ended[dead]); d > 15*time.Second {
			t.Errorf("rank %d exited %s after rank %d was killed, want within 15 s", r, d, dead)
		}
	}
}
