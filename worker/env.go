package worker

// env.go: the package's one reader of environment variables. (The process group's own, MASTER_ADDR,
// MASTER_PORT, DDP_TOKEN, DDP_TRANSPORT, ..., are allreduce.ConfigFromEnv's.)

import (
	"fmt"
	"os"
	"strconv"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// Env is what the launcher tells a worker through the environment (torchrun's names).
type Env struct {
	Rank, LocalRank, WorldSize, LocalWorldSize int
	NodeRank                                   int
	RestartCount                               int // DDP_RESTART_COUNT, else TORCHELASTIC_RESTART_COUNT (torchrun's)
	ProgressFD                                 int // DDP_PROGRESS_FD, -1 when unset
	HeartbeatFD                                int // DDP_HEARTBEAT_FD (ddplaunch's liveness pipe), -1 when unset
}

// EnvFromOS reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, DDP_RESTART_COUNT (or,
// when it is unset, torchrun's TORCHELASTIC_RESTART_COUNT) and DDP_PROGRESS_FD (the terminal the launcher hands rank 0 for the progress bar); absent variables
// mean a single process. A malformed value is an error naming the variable.
func EnvFromOS() (Env, error) {
	e := Env{WorldSize: 1, LocalWorldSize: 1, ProgressFD: -1, HeartbeatFD: -1}
	restarts := "DDP_RESTART_COUNT"
	if s, ok := os.LookupEnv(restarts); !ok || s == "" {
		restarts = "TORCHELASTIC_RESTART_COUNT"
	}
	for _, v := range []struct {
		name string
		dst  *int
	}{{"RANK", &e.Rank}, {"LOCAL_RANK", &e.LocalRank}, {"WORLD_SIZE", &e.WorldSize},
		{"LOCAL_WORLD_SIZE", &e.LocalWorldSize}, {"NODE_RANK", &e.NodeRank}, {restarts, &e.RestartCount}, {"DDP_PROGRESS_FD", &e.ProgressFD}, {"DDP_HEARTBEAT_FD", &e.HeartbeatFD}} {
		s, ok := os.LookupEnv(v.name)
		if !ok || s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return e, fmt.Errorf("worker: environment variable %s=%q is not an integer", v.name, s)
		}
		*v.dst = n
	}
	if e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize {
		return e, fmt.Errorf("worker: RANK=%d is outside WORLD_SIZE=%d", e.Rank, e.WorldSize)
	}
	// The developer switches, read as "0"/"1" tests where they apply: a mistyped one fails here
	// (the CUDA device's own are checked when it is made, model/cuda's checkEnv).
	if err := tensor.CheckSwitches(os.Getenv, "worker", []string{"GODDP_STEP_END_WAIT"}); err != nil {
		return e, err
	}
	if err := cpu.CheckEnv(); err != nil {
		return e, err
	}
	return e, nil
}

// visibleDevicesEnv is CUDA_VISIBLE_DEVICES as this process has it ("" when unset): the ranks
// compare theirs before copying between devices (sharedgpu.go).
func visibleDevicesEnv() string { return os.Getenv("CUDA_VISIBLE_DEVICES") }

// mpsPipeDir is where an MPS control daemon (nvidia-cuda-mps-control -d) of this user keeps its
// pipes: CUDA_MPS_PIPE_DIRECTORY, else NVIDIA's default /tmp/nvidia-mps.
func mpsPipeDir() string {
	if d := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); d != "" {
		return d
	}
	return "/tmp/nvidia-mps"
}

// stepEndWaits reports whether a training step ends by waiting for its optimizer before the loss
// read (GODDP_STEP_END_WAIT=1). The default is the other way since session 21: the losses read
// with the loss scaler's read-back, which waits for the backward anyway, and the step returning
// once the optimizer is enqueued, so the host's records and the next step's first enqueues
// overlap the device's optimizer — loop.go's update; docs/perf-gpu.md "The step's end without a
// wait" (the whole -tags cuda suite ran with it on an H100, TestStepEnd_noWaitSameRun among it;
// with the unscale fold ddptrain's step fell 0.25 ms at b16 and at b8). Without a read-back (fp32,
// bf16 unchecked) the loss read still follows the optimizer. Read at each step.
func stepEndWaits() bool { return os.Getenv("GODDP_STEP_END_WAIT") == "1" }
