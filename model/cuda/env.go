//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
	"sync"
)

// The environment the CUDA device reads, all of it here:
//
//	GODDP_FLASH=0     turns the fused attention kernels off (flash.go)
//	GODDP_BN_SPLIT=1  splits the batch norms' per-channel reductions over row chunks (conv.go)
//	GODDP_CUDNN_TF32=1 lets f32 convolutions use TF32 tensor cores (conv.go; as PyTorch's default)
//	GODDP_BN_VEC=1    8-wide batch-norm passes and reductions, and ReLU (conv.go, ops.go)
//	GODDP_BN_RELU=1   the ResNet's ReLUs folded into the batch norms' passes (conv.go; with GODDP_BN_SPLIT=1)
//	GODDP_CUDNN_GRAPH=1 convolutions through cached cuDNN execution plans, not the legacy calls (conv.go)
//	GODDP_XENT_FUSED=0 the loss head's cross-entropy in two launches (one is the default; ops.go)
//	XDG_CACHE_HOME    where compiled kernels are cached (KernelCacheDir)

// flashOff reports whether GODDP_FLASH=0 turned the fused attention off.
func flashOff() bool { return os.Getenv("GODDP_FLASH") == "0" }

// bnSplit reports whether GODDP_BN_SPLIT=1 asked for the split batch-norm reductions
// (k_chan_part): many blocks per channel tile instead of one. Faster on the H100 (ResNet-50 fp16
// b128 96.4 -> 70.8 ms, docs/perf-resnet-gpu.md), but its test against the CPU
// (TestCUDA_bnSplitMatchesCPU) has not run on a GPU yet: off by default until it has. Read once.
var bnSplit = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_SPLIT") == "1" })

// cudnnTF32 reports whether GODDP_CUDNN_TF32=1 let f32 convolutions use TF32 (cuDNN's tensor-op
// math; the default is FMA only, as the device's f32 GEMMs). Read once.
var cudnnTF32 = sync.OnceValue(func() bool { return os.Getenv("GODDP_CUDNN_TF32") == "1" })

// xentFused reports whether CrossEntropyWithGrad takes one launch: the default since the H100 A/B
// of 2026-12-05 (GPT-2 small b16 42.44 -> 41.76 ms, the same bits: docs/perf-gpu.md);
// GODDP_XENT_FUSED=0 keeps the two launches. Read once.
var xentFused = sync.OnceValue(func() bool { return os.Getenv("GODDP_XENT_FUSED") != "0" })

// bnVec reports whether GODDP_BN_VEC=1 asked for the 8-wide kernels of the batch norms (NHWC,
// channels in eights) and of ReLU: the elementwise passes (the same arithmetic per element, 16-byte
// accesses; run on an H100: the same bits, within noise of the scalar ones) and, with
// GODDP_BN_SPLIT=1, the split reductions (k_chan_part8: sums grouped otherwise, within rounding;
// not yet run on a GPU). Off by default. Read once.
var bnVec = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_VEC") == "1" })

// bnReLU reports whether GODDP_BN_RELU=1 asked for the ReLU after a batch norm folded into its
// passes (tensor.BatchNormReLUDevice: the apply pass ReLUs what it writes; backward masks dy in
// the reductions and the elementwise pass instead of a ReLU backward pass of its own). Taken only
// with GODDP_BN_SPLIT=1. Not yet run on a GPU: off by default. Read once.
var bnReLU = sync.OnceValue(func() bool { return os.Getenv("GODDP_BN_RELU") == "1" })

// cudnnGraph reports whether GODDP_CUDNN_GRAPH=1 asked for the convolutions through cuDNN's graph
// API: one execution plan per operation, shape and beta, built once and run with a variant pack
// (cudnn.Plan), where each legacy call cost the host ~200 µs under cuDNN 9 and made a ResNet-50
// step host-bound (docs/perf-resnet-gpu.md). Not yet run on a GPU: off by default. Read once.
var cudnnGraph = sync.OnceValue(func() bool { return os.Getenv("GODDP_CUDNN_GRAPH") == "1" })

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
