package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/config"
)

// intraHostDevice puts the engine on the device path for `ddp.intra_host: device` (issue 34
// stage 2, ddp/engine_device.go; run on one H200 shared by 2 and 4 workers, 2026-12-05): refused
// on a device without the IPC all-reduce (the CPU), on every rank alike before any collective;
// workers sharing a GPU are warned (there it measured slower than the host path, with MPS and
// without: docs/perf-gpu-ddp.md). With several hosts the
// engine's groups are the hierarchy's rings (startEngine opens them: deviceAcrossHosts) and the
// device path inside each host is composed with the ring between hosts. auto and host stay on
// the host path.
func (t *Trainer) intraHostDevice(ctx context.Context, eng *ddp.Engine) error {
	v, err := config.ParseIntraHost(string(t.cfg.DDP.IntraHost))
	if err != nil || v != config.IntraHostDevice {
		return err
	}
	if _, ok := t.dev.(tensor.IPCStreamDevice); !ok {
		return fmt.Errorf("ddp.intra_host: device needs --device cuda (this run's device is %s); use auto or host", t.dev.Name())
	}
	if visibleGPUs != nil {
		if n, err := visibleGPUs(); err == nil && n < t.env.LocalWorldSize {
			slog.Warn("ddp.intra_host: device with workers sharing GPUs: without MPS each all-reduce waits for the GPU to switch between the workers' contexts (3.7x slower than the host path, 2 workers of one H200); under MPS (nvidia-cuda-mps-control -d) the kernel-paced all-reduce spins on the lagging worker (1.8x slower, 2 workers of one H100; 4 deadlocked until the abort) and GODDP_IPC_WAIT=stream, which waits on the stream instead, costs ~5.5 ms a bucket there (2.8x slower, 2 workers of one H100; docs/perf-gpu-ddp.md); use auto or host",
				"local_world_size", t.env.LocalWorldSize, "gpus", n)
		}
	}
	hosts := max(1, t.env.WorldSize/max(1, t.env.LocalWorldSize))
	return eng.UseDevice(ctx, hosts)
}

// visibleGPUs counts the GPUs this process sees (nil in a build without cuda: device_cuda.go).
var visibleGPUs func() (int, error)

// gpuCount is visibleGPUs, or an error in a build without cuda.
func gpuCount() (int, error) {
	if visibleGPUs == nil {
		return 0, errors.New("no cuda in this build")
	}
	return visibleGPUs()
}

// deviceAcrossHosts reports whether ddp.intra_host is device in a world of several hosts: the
// engine then runs over allreduce.Hierarchy's rings, as ddp.hierarchical does.
func (t *Trainer) deviceAcrossHosts() bool {
	_, ipc := t.dev.(tensor.IPCStreamDevice) // without it intraHostDevice refuses, rings or not
	return ipc && t.wantsDeviceReduce() && t.env.WorldSize > max(1, t.env.LocalWorldSize)
}

// wantsDeviceReduce reports whether ddp.intra_host is device (then the engine skips the pinned
// staging it would otherwise set up, which the device path replaces).
func (t *Trainer) wantsDeviceReduce() bool {
	v, err := config.ParseIntraHost(string(t.cfg.DDP.IntraHost))
	return err == nil && v == config.IntraHostDevice
}

// shardGatherDevice switches the sharded step's gather of the f16 weights to copies between the
// devices (ddp/shard_peer.go) for `ddp.shard_gather: device`, and for auto where it applies: a
// sharded run of several ranks of one host sharing its one GPU, on the sharded staged path of a
// device that maps its peers' memory (--device cuda under fp16; measured on an H100 shared by 2
// and 4 workers: 0.94× and 0.87× the unsharded step, against 1.20× and 1.06× through the host). device is refused, on every
// rank alike before any collective, where the world spans hosts (CUDA IPC maps memory of one host)
// or the device cannot map its peers' memory (the CPU); the engine refuses it off the sharded
// staged path naming why. auto keeps the host ring where device would be refused, and where a
// device could not map its peers (every rank learns of it: ddp.ErrPeerSetup), saying so.
func (t *Trainer) shardGatherDevice(ctx context.Context, eng *ddp.Engine) error {
	v, err := config.ParseShardGather(string(t.cfg.DDP.ShardGather))
	if err != nil || v == config.ShardGatherHost {
		return err
	}
	if v == config.ShardGatherAuto {
		if t.peerCopiesRefusal("") != nil || t.env.WorldSize < 2 {
			return nil
		}
		// What was measured: the local ranks sharing one GPU. Ranks on several GPUs copy over
		// NVLink or PCIe peer access, not yet run: opt-in (device) until a multi-GPU host runs it.
		if one, why := t.oneSharedGPU(); !one {
			if t.log != nil && eng != nil && eng.Shard() != nil {
				t.log.Info("ddp.shard_gather auto: the f16 weights go through the host ring: the ranks do not share one GPU (" + why + "), and copies between several GPUs are not yet measured (ddp.shard_gather: device takes them)")
			}
			return nil
		}
		if eng.Shard() == nil || eng.PeerGatherRefusal() != nil {
			return nil
		}
		err := eng.UsePeerGather(ctx)
		if errors.Is(err, ddp.ErrPeerSetup) {
			t.log.Warn("ddp.shard_gather auto: the f16 weights go through the host ring: the devices could not map each other's memory (set ddp.shard_gather: host to skip the attempt)", "err", err)
			return nil
		}
		return err
	}
	if err := t.peerCopiesRefusal("ddp.shard_gather: device"); err != nil {
		return err
	}
	return eng.UsePeerGather(ctx)
}

// peerCopiesRefusal says why what (a key and its value asking for copies between the devices)
// cannot apply to this run, before the engine is asked, alike on every rank: a device that cannot
// map its peers' memory (the CPU), or a world of several hosts (CUDA IPC maps memory of one
// host). nil: the engine decides.
func (t *Trainer) peerCopiesRefusal(what string) error {
	if _, ok := t.dev.(tensor.PeerMirrorDevice); !ok {
		return fmt.Errorf("%s needs --device cuda (this run's device is %s); use auto or host", what, t.dev.Name())
	}
	if hosts := t.env.WorldSize / max(1, t.env.LocalWorldSize); hosts > 1 {
		return fmt.Errorf("%s with %d hosts: the devices copy from each other inside one host only; use auto or host", what, hosts)
	}
	return nil
}

// shardReduceDevice switches the sharded step's reduce-scatter of the f16 gradients to copies
// between the devices (ddp/shard_peer_reduce.go) for `ddp.shard_reduce: device`, and for auto
// where it was measured: the weights already gathered by copies (shardGatherDevice, which auto
// takes only for ranks of one host sharing its one GPU) on that one GPU. Measured on an H100 in
// session 22 (GPT-2 small, micro-batch 8): 46.67 ms at W = 2 and 93.42 at W = 4 against 50.91 and
// 102.42 with the reduce-scatter through the host, the unsharded run's param_sha256. device is
// refused, on every rank alike before any collective, where the world spans hosts (CUDA IPC maps
// memory of one host) or the device cannot map its peers' memory (the CPU); the engine refuses it
// off the sharded staged path, naming why (ddp.PeerReduceRefusal). Under auto a failed setup
// (ddp.ErrPeerSetup, on every rank alike) keeps the host ring, saying so.
func (t *Trainer) shardReduceDevice(ctx context.Context, eng *ddp.Engine) error {
	v, err := config.ParseShardReduce(string(t.cfg.DDP.ShardReduce))
	if err != nil || v == config.ShardReduceHost {
		return err
	}
	if v == config.ShardReduceAuto {
		// Alike on every rank: PeerGather is the outcome of a collective, oneSharedGPU the
		// ranks' agreement, the refusal reads the configuration.
		if eng == nil || !eng.PeerGather() || eng.PeerReduceRefusal() != nil {
			return nil
		}
		if one, _ := t.oneSharedGPU(); !one {
			return nil // several GPUs: the gather by copies was asked for by name; not measured here
		}
		err := eng.UsePeerReduce(ctx)
		if errors.Is(err, ddp.ErrPeerSetup) {
			t.log.Warn("ddp.shard_reduce auto: the f16 gradients go through the host ring: the devices could not map each other's staging buffers (set ddp.shard_reduce: host to skip the attempt)", "err", err)
			return nil
		}
		if err == nil && t.log != nil {
			t.log.Info("ddp.shard_reduce auto: the f16 gradients are reduce-scattered by copies between the devices: the ranks share this host's one GPU and gather the weights by copies already (ddp.shard_reduce: host keeps the host ring)")
		}
		return err
	}
	if err := t.peerCopiesRefusal("ddp.shard_reduce: device"); err != nil {
		return err
	}
	return eng.UsePeerReduce(ctx)
}

// intraHostCopies switches the unsharded staged path's all-reduce of the f16 gradients to copies
// between the devices (ddp/engine_peer.go) for `ddp.intra_host: copies`, and for auto where it
// was measured (copiesByAuto): several ranks of one host sharing its one GPU. copies is refused,
// on every rank alike before any collective, where the device cannot map its peers' memory or the
// world spans hosts (peerCopiesRefusal); the engine refuses it off the unsharded staged path with
// the f16 wire, naming why (ddp.PeerCopiesRefusal), and a failed setup fails the run on every rank
// alike (the key asked for it). Under auto a failed setup (every rank learns of it:
// ddp.ErrPeerSetup) keeps the host path, saying so.
func (t *Trainer) intraHostCopies(ctx context.Context, eng *ddp.Engine) error {
	v, err := config.ParseIntraHost(string(t.cfg.DDP.IntraHost))
	if err != nil || (v != config.IntraHostCopies && v != config.IntraHostAuto) {
		return err
	}
	if v == config.IntraHostAuto {
		if eng != nil && eng.Shard() != nil {
			return nil // the sharded step: ddp.shard_reduce and ddp.shard_gather decide
		}
		var refusal error
		if eng != nil {
			refusal = eng.PeerCopiesRefusal()
		}
		take, why := t.copiesByAuto(refusal)
		if !take {
			if why != "" && t.log != nil {
				t.log.Info("ddp.intra_host auto: the host path: " + why)
			}
			return nil
		}
		err := eng.UsePeerCopies(ctx)
		if errors.Is(err, ddp.ErrPeerSetup) {
			t.log.Warn("ddp.intra_host auto: the host path: the devices could not map each other's memory (set ddp.intra_host: host to skip the attempt)", "err", err)
			return nil
		}
		if err == nil && t.log != nil {
			t.log.Info("ddp.intra_host auto: copies between the devices: " + why)
		}
		return err
	}
	if err := t.peerCopiesRefusal("ddp.intra_host: copies"); err != nil {
		return err
	}
	return eng.UsePeerCopies(ctx)
}

// copiesByAuto decides `ddp.intra_host: auto` for this run, alike on every rank (it reads the
// configuration, the device's kind, the world's shape and the GPUs this host shows every rank):
// copies between the devices where what was measured applies — every rank on this host, several
// of them sharing its one GPU, the engine on the unsharded staged path with the f16 wire
// (engineRefusal nil: ddp.PeerCopiesRefusal). Measured on an H100 shared by 2 and 4 workers
// (GPT-2 small, micro-batch 8; docs/perf-gpu-ddp.md, session 22): 46.00 and 93.93 ms a step
// against the host path's 55.66 and 123.86 (1.06× and 1.08× N × the one-worker step; under MPS
// 0.93× and 0.94×), the host ring's very weights. Ranks on several GPUs copy over NVLink or PCIe
// peer access, not yet run: they stay on the host path until a multi-GPU host runs it
// (ddp.intra_host: copies takes it). why says which path and why, for the one Info line ("" where
// there is nothing to say: alone, or a device that cannot map its peers, such as the CPU).
func (t *Trainer) copiesByAuto(engineRefusal error) (take bool, why string) {
	if t.env.WorldSize < 2 {
		return false, ""
	}
	if _, ok := t.dev.(tensor.PeerMirrorDevice); !ok {
		return false, ""
	}
	if hosts := t.env.WorldSize / max(1, t.env.LocalWorldSize); hosts > 1 {
		return false, fmt.Sprintf("the world spans %d hosts, and the devices copy from each other inside one host only", hosts)
	}
	if t.cfg.DDP.Hierarchical {
		return false, "ddp.hierarchical asks for the host planes' rings (its sums in another order than the flat ring's, which copies reproduces)"
	}
	if one, why := t.oneSharedGPU(); !one {
		return false, fmt.Sprintf("the %d ranks do not share one GPU (%s), and copies between several GPUs are not yet measured (ddp.intra_host: copies takes them)", t.env.WorldSize, why)
	}
	if engineRefusal != nil {
		return false, "copies would not apply: " + engineRefusal.Error()
	}
	why = fmt.Sprintf("the %d ranks share this host's one GPU, where the copies measured faster than the host path with the host ring's bits (ddp.intra_host: host keeps the host path)", t.env.WorldSize)
	if !mpsRunning() {
		why += "; no MPS daemon seen: under MPS (nvidia-cuda-mps-control -d) the ranks' kernels run at once, 12–13% faster again at 2 and 4 ranks on an H100"
	}
	return true, why
}

// mpsRunning reports whether an MPS control daemon's pipe is there (mpsPipeDir): the ranks'
// contexts then share the GPU at once instead of taking turns. A hint for the Info line only.
func mpsRunning() bool {
	_, err := os.Stat(filepath.Join(mpsPipeDir(), "control"))
	return err == nil
}
