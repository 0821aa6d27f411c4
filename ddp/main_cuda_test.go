//go:build cuda

package ddp

import (
	"os"
	"testing"
)

// TestMain loads every CUDA kernel when the context is created (CUDA_MODULE_LOADING=EAGER, unless
// the caller chose). The device-path tests run their ranks as goroutines of this process, so all
// ranks share GPU 0's primary context; under lazy loading (the driver's default since CUDA 11.7) a
// rank's first launch of a kernel loads it, and loading waits for the context's running kernels —
// among them a peer's IPC all-reduce spinning until this rank's arrives, which this rank can now
// never launch. Seen on the H200 on 2026-12-05: TestCUDADevice_trainsGPTLikeHostPath, the first
// test of the process, stopped at step 0 with "rank 1 never arrived" while the same path across
// processes (scripts/gpu-stage3.sh ipc) trained to identical replicas. Ranks that are processes
// have a context each and cannot wait on one another this way (docs/ddp-device-path.md).
// EAGER alone did not do it: on an H100 on 2026-12-05 the same test still stopped at step 0 ("rank
// 0 never arrived") while every later device-path test of the run passed — the kernels were loaded
// by then. Libraries load some of theirs at first use whatever this variable says (cuBLAS's GEMM
// kernels for a new shape or transpose), so the test also runs the host path first
// (TestCUDADevice_trainsGPTLikeHostPath), which loads them while nothing spins. With that the f32
// and f16 wires passed (H100, 14:32); the bf16 wire still stopped: each cuda.Device loads its bf16
// module at its first bf16 kernel (bf16Fns), which on the device path was the first cast into the
// IPC buffer — NewIPCReducer now loads it at setup.
//
// CUDA_DEVICE_MAX_CONNECTIONS=32 (unless the caller chose): the ranks' streams share the one
// context's hardware queues, and under GODDP_IPC_WAIT=stream a stream waiting for a stopped peer
// blocks its queue — with the default 8 queues and three ranks' 18 streams, the abort stream that would
// release it too (model/cuda/env.go's streamConnections; the process's first device decides, so
// it is set here, before any).
func TestMain(m *testing.M) {
	if _, set := os.LookupEnv("CUDA_MODULE_LOADING"); !set {
		os.Setenv("CUDA_MODULE_LOADING", "EAGER")
	}
	if _, set := os.LookupEnv("CUDA_DEVICE_MAX_CONNECTIONS"); !set {
		os.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
	}
	os.Exit(m.Run())
}
