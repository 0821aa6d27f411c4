//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// The environment the CUDA device reads, all of it here:
//
//	GODDP_FLASH=0     turns the fused attention kernels off (flash.go)
//	GODDP_BN_SPLIT=0  the batch norms' per-channel reductions one block per channel tile, not split over row chunks (conv.go)
//	GODDP_CUDNN_TF32=1 lets f32 convolutions use TF32 tensor cores (conv.go; as PyTorch's default)
//	GODDP_BN_VEC=0    scalar batch-norm passes and reductions, and ReLU, not 8-wide (conv.go, ops.go)
//	GODDP_BN_RELU=0   the ResNet's ReLUs as passes of their own, not folded into the batch norms' (conv.go)
//	GODDP_SGD_MULTI=1 SGD over every parameter in one launch, k_sgd_multi (ops.go; off: not yet run on a GPU under the whole suite)
//	GODDP_COLSUM_VEC=1 column sums (bias gradients) 8 columns a thread, k_colsum_part8 (ops.go; the same bits; measured no faster on an H100, its test not yet run)
//	GODDP_FLASH_CARVEOUT=N the fused attention kernels' preferred shared-memory carveout, percent of the SM's L1/shared (flash.go; read at load; not yet run on a GPU)
//	GODDP_CUDNN_GRAPH=0 convolutions through cuDNN's legacy calls, not cached execution plans (conv.go)
//	GODDP_XENT_FUSED=0 the loss head's cross-entropy in two launches (one is the default; ops.go)
//	GODDP_IPC_WAIT=stream the IPC all-reduce's ranks wait for each other by their streams, not in the
//	                  kernel (ipc_pace.go; read at each NewIPCReducer; not yet run on a GPU)
//	XDG_CACHE_HOME    where compiled kernels are cached (KernelCacheDir)

// flashOff reports whether GODDP_FLASH=0 turned the fused attention off.
func flashOff() bool { return os.Getenv("GODDP_FLASH") == "0" }

// bnSplit reports whether the batch norms' reductions are split over row chunks (k_chan_part,
// chanPlan): many blocks per channel tile instead of one. The default since the H100 runs of
// 2026-12-05 (TestCUDA_bnSplitMatchesCPU and the whole -tags cuda suite passed with it; the sums
// of a ResNet-50 step at b64 37 -> 4.3 ms, docs/perf-resnet-gpu.md); GODDP_BN_SPLIT=0 keeps one
// block per channel tile. Read once.
var bnSplit = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_SPLIT") != "0" })

// cudnnTF32 reports whether GODDP_CUDNN_TF32=1 let f32 convolutions use TF32 (cuDNN's tensor-op
// math; the default is FMA only, as the device's f32 GEMMs). Read once.
var cudnnTF32 = sync.OnceValue(func() bool { return os.Getenv("GODDP_CUDNN_TF32") == "1" })

// xentFused reports whether CrossEntropyWithGrad takes one launch: the default since the H100 A/B
// of 2026-12-05 (GPT-2 small b16 42.44 -> 41.76 ms, the same bits: docs/perf-gpu.md);
// GODDP_XENT_FUSED=0 keeps the two launches. Read once.
var xentFused = sync.OnceValue(func() bool { return os.Getenv("GODDP_XENT_FUSED") != "0" })

// bnVec reports whether the batch norms (NHWC, channels in eights) and ReLU take their 8-wide
// kernels: the elementwise passes (the same arithmetic per element, 16-byte accesses: the same
// bits as the scalar ones, TestCUDA_bnVecSameBits) and the split reductions (k_chan_part8: sums
// grouped otherwise, within rounding; TestCUDA_bnSplitMatchesCPU). The default since the H100 runs
// of 2026-12-05; GODDP_BN_VEC=0 keeps the scalar kernels. Read once.
var bnVec = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_VEC") != "0" })

// bnReLU reports whether the ReLU after a batch norm is folded into its passes
// (tensor.BatchNormReLUDevice: the apply pass ReLUs what it writes; backward masks dy in the
// reductions and the elementwise pass instead of a ReLU backward pass of its own; the unfused
// pair's bits, TestCUDA_bnReLUFusedSameBits). Taken only with the split reductions. The default
// since the H100 runs of 2026-12-05; GODDP_BN_RELU=0 keeps the passes apart. Read once.
var bnReLU = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_RELU") != "0" })

// cudnnGraph reports whether the convolutions go through cuDNN's graph API: one execution plan
// per operation, shape and beta, built once and run with a variant pack (cudnn.Plan), where each
// legacy call cost the host ~200 µs under cuDNN 9 and made a ResNet-50 step host-bound (the
// host's share of a b64 step 36.5 -> 5.0 ms, docs/perf-resnet-gpu.md; TestCUDA_convGraphMatchesCPU).
// The default since the H100 runs of 2026-12-05; GODDP_CUDNN_GRAPH=0 keeps the legacy calls.
// Read once.
var cudnnGraph = sync.OnceValue(func() bool { return os.Getenv("GODDP_CUDNN_GRAPH") != "0" })

// sgdMulti reports whether GODDP_SGD_MULTI=1 asked for SGD in one launch (tensor.MultiSGD):
// 108 launches of a ResNet-50 step become one (0.69 -> 0.21 ms on an H100, docs/perf-resnet-gpu.md;
// TestCUDA_sgdMultiMatchesPerRun: the per-run bits). Read at each optimizer's construction, so a
// test can set it.
func sgdMulti() bool { return os.Getenv("GODDP_SGD_MULTI") == "1" }

// KernelCacheDir is where compiled kernels are kept: $XDG_CACHE_HOME/goddp/kernels, by default
// ~/.cache/goddp/kernels.
func KernelCacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		if h, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(h, ".cache")
		} else {
			base = os.TempDir()
		}
	}
	return filepath.Join(base, "goddp", "kernels")
}

// ipcWaitStream reports whether GODDP_IPC_WAIT asks for stream-paced meetings; read at each
// NewIPCReducer (tests run both), and every rank must agree (Connect checks).
func ipcWaitStream() (bool, error) {
	switch v := os.Getenv("GODDP_IPC_WAIT"); v {
	case "", "kernel":
		return false, nil
	case "stream":
		return true, nil
	default:
		return false, fmt.Errorf("cuda: GODDP_IPC_WAIT=%q: want kernel (the default) or stream", v)
	}
}

// colsumVec reports whether GODDP_COLSUM_VEC=1 asked for k_colsum_part8 in colSum (BiasGrad):
// 16-byte loads, four rows in flight a thread, where k_colsum_part reads 2 bytes a thread a row
// (GPT-2 small's bias gradients read ~2.7 GB a step at batch 16: ~0.8 ms at HBM's rate). The
// same sums in the same order: TestCUDA_colsumVecSameBits (not yet run on a GPU). Measured on an
// H100 in session 15: −0.3% at batch 16, inside the noise (docs/perf-gpu.md), so it stays off.
// Read at each call, so a test can set it.
func colsumVec() bool { return os.Getenv("GODDP_COLSUM_VEC") == "1" }

// flashCarveoutUnset is flashCarveout's "not set": the driver's default (no preference).
const flashCarveoutUnset = -2

// flashCarveout is GODDP_FLASH_CARVEOUT: -1 (no preference) to 100 (the most shared memory), the
// carveout the f16 attention kernels ask for when loaded (cudadrv.Function.SetCarveout). An A/B
// for issue 35: whether the driver's default split of the SM's L1 and shared memory limits how
// many attention blocks are resident (each holds 36 KiB of shared memory). Unset:
// flashCarveoutUnset. Not yet run on a GPU.
func flashCarveout() (int, error) {
	v := os.Getenv("GODDP_FLASH_CARVEOUT")
	if v == "" {
		return flashCarveoutUnset, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 || n > 100 {
		return 0, fmt.Errorf("cuda: GODDP_FLASH_CARVEOUT=%q: want a percent from 0 to 100, or -1 for no preference", v)
	}
	return n, nil
}
