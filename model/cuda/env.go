//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The environment the CUDA device reads, all of it here:
//
//	GODDP_FLASH=0     turns the fused attention kernels off (flash.go)
//	GODDP_BN_SPLIT=0  the batch norms' per-channel reductions one block per channel tile, not split over row chunks (conv.go)
//	GODDP_CUDNN_TF32=1 lets f32 convolutions use TF32 tensor cores (conv.go; as PyTorch's default)
//	GODDP_BN_VEC=0    scalar batch-norm passes and reductions, and ReLU, not 8-wide (conv.go, ops.go)
//	GODDP_BN_RELU=0   the ResNet's ReLUs as passes of their own, not folded into the batch norms' (conv.go)
//	GODDP_SGD_MULTI=0 SGD per parameter run, not k_sgd_multi's one launch (ops.go; one launch is the default since session 17's whole suite)
//	GODDP_CLIP_FUSED=0 gradient clipping by passes of its own (the norm's, the scaling's), not folded into the scaler's check and AdamW's step (ops.go; the same bits; folded is the default since session 17)
//	GODDP_UNSCALE_FOLD=0 the loss scaler's check unscales the gradients in place (k_unscale_sumsq, k_unscale) and AdamW reads them unscaled (k_adamw, k_adamw_multi), not a check that reads them (k_check_sumsq, k_check) and AdamW multiplying each by the inverse scale as it reads it (k_adamw_us, k_adamw_multi_us) (ops.go; the same bits; folded is the default since session 21's H100 run)
//	GODDP_BIAS_FOLD=0 the GPT blocks' bias adds as passes of their own, not folded into GELU and the residual adds (k_addbias_gelu8, k_addbias_add8; ops.go; the same bits; folded is the default since session 18's whole suite)
//	GODDP_COLSUM_FUSED=0 the bias gradients' column sums finished by a second launch (k_colsum_finish), not each column block's last block (k_colsum_partfin), and a LayerNorm's dw and db finished apart, not in one launch (k_colsum_finish2) (ops.go; the same bits; one launch is the default since session 19's whole suite)
//	GODDP_LN_VEC=0    LayerNorm's forward by k_layernorm, not 8 wide with the row in registers (k_ln_fwd8_K; ops.go; within rounding of k_layernorm, not its bits; 8 wide is the default since session 18's whole suite)
//	GODDP_COLSUM_VEC=1 column sums (bias gradients) 8 columns a thread, k_colsum_part8 (ops.go; the same bits, its test passed on an H100; measured no faster)
//	GODDP_FLASH_CARVEOUT=N the fused attention kernels' preferred shared-memory carveout, percent of the SM's L1/shared (flash.go; read at load; measured no change on an H200, session 16)
//	GODDP_FLASH_TILE_MAJOR=0 the attention kernels' grid (tiles, B·H), not (B·H, tiles) with every head's longest tile first (flashOptions; the default since session 17's H100 A/B)
//	GODDP_FLASH_MINBLOCKS=F,Q,K the attention kernels' __launch_bounds__ blocks per SM, 0 no cap (flashOptions; 4,4,3 spills and measured slower on an H100, session 17; the default 0,0,3 caps dk/dv at 3 blocks: −0.20 ms at b16 on an H100, session 23)
//	GODDP_FLASH_EX2=0 the attention kernels' exponentials by exp2f, with its subnormal handling around the ex2.approx.ftz they take by default (flashOptions; the same bits, TestCUDA_flashOptionsSameBits passed on an H100; ex2 alone is the default since session 20: −0.7% at b16)
//	GODDP_FLASH_PACK2=1 the attention kernels' f16 (bf16) pairs packed by one cvt.rn.f16x2.f32 each (flashOptions; the same bits, its test passed on an H100 in session 20; measured +0.3% at b16, noise: off)
//	GODDP_FLASH_DELTA8=0 the attention backward's row sums Σ dy·y one thread a row (k_flash_bwd_delta), not eight lanes a row, coalesced (k_flash_bwd_delta8; the same bits, its test passed on an H100 in session 23, the kernel 0.48 → 0.36 ms at b16: the default)
//	GODDP_FLASH_MASK_SPLIT=1 the attention forward's and dk/dv's causal-mask tests only on the tiles that cross the diagonal (flashOptions: FLASH_MASK_SPLIT; the same bits, TestCUDA_flashOptionsSameBits passed on an H100 in session 25; −0.21 ms at b16 there: off until the whole suite runs with it; the Hopper kernels split their masks anyway)
//	GODDP_FLASH_DQ_PAIR=1 the dS-once dq kernel with two query tiles a block, each K tile fetched once for both (k_flash_bwd_dq_ds2; the same bits, its test passed on an H100 in session 25; not measured: off)
//	GODDP_FLASH_WGMMA=0 the attention kernels on mma.sync on compute capability 9.0, not on Hopper's warpgroup instructions (wgmma.mma_async, f16 and bf16; flash_wgmma.go): unset, fwdp,dkdv,dq there — the overlapped forward (k_flash_wg_fwdp), the dS-once backward's dk/dv (k_flash_wg_dkdv) and dq (k_flash_wg_dq) — the default since session 26's whole suite (hopperDefault; the backward the mma.sync kernels' bits, the forward within its derived bound; −1.76 ms at b16 in session 25); or a list of parts: fwd (k_flash_wg_fwd, k_flash_wg_fwd128 under 128-row blocks), fwdp, dkdv, dkdv128 (k_flash_wg_dkdv128: 128 keys a block), dq; =1 fwd,dkdv,dq. A set value on another device is refused
//	GODDP_FLASH_DELTA_FOLD=1 the attention backward's row sums Σ dy·y made by the dq kernel (k_flash_bwd_dq_delta, launched before dk/dv), not a pass of their own (k_flash_bwd_delta) (flash.go; the same bits, its test passed on an H100 in session 20; measured −0.1 ms at b16, inside the noise: off)
//	GODDP_FLASH_DS=0  the attention backward's dS recomputed for dq (k_flash_bwd_dkdv, k_flash_bwd_dq) instead of computed once, the default: stored by the dk/dv kernel, multiplied by K for dq (k_flash_bwd_dkdv_ds, k_flash_bwd_dq_ds; flash.go; the same bits, TestCUDA_flashDSSameBits passed on an H100 in sessions 21 and 22; B·H·n(n+1)/2·8 KiB of scratch for n query tiles; with its stores staged through shared memory −0.31 ms at b16, −0.06 at b8, session 22: the default)
//	GODDP_GELU_TANH_APPROX=1 the 8-wide GELU kernels' tanh as one tanh.approx.f32, not tanhf (kernelOptions; within ~2^-11 relative, not tanhf's bits; its bound test passed on an H100 in session 21, measured +0.6% at b16: off)
//	GODDP_XENT_EX2=1   the cross-entropy's exponentials as one ex2.approx.ftz each, not expf (kernelOptions; within ~2^-18 relative where it matters, not expf's bits; its bound test passed on an H100 in session 21, measured −0.05% at b16, noise: off)
//	GODDP_CUDNN_GRAPH=0 convolutions through cuDNN's legacy calls, not cached execution plans (conv.go)
//	GODDP_XENT_FUSED=0 the loss head's cross-entropy in two launches (one is the default; ops.go)
//	GODDP_BIAS_EPILOGUE=0 a GPT without model.gemm_epilogue takes no cublasLt bias-only epilogues (the QKV bias add, the linears' bias gradients in their weight-gradient GEMMs: lt.go; within rounding; the default since session 19's whole suite)
//	GODDP_EMB_SORTED=1 the embedding's backward deterministic: positions sorted by token, each token's rows added in order (k_emb_sort, k_emb_bwd_sorted; ops.go; the CPU device's bits; its test passed on an H100 in session 19, measured 0.1–1% slower: off)
//	GODDP_LN_BWD_FUSED=0 the 8-wide LayerNorm backward's dx and its dw, db parts in two launches, not one pass (k_ln_bwd8f_K; ops.go; the same bits; one pass is the default since session 19's whole suite)
//	GODDP_RESNORM_FOLD=0 a GPT's residual sums and the layer norms that read them as two passes, not one (k_addbias_add_ln8_K; ops.go; the same bits; one pass is the default since session 19's whole suite)
//	GODDP_GELU_DB_FOLD=0 a GPT block's fc bias gradient summed by a pass of its own, not in GELU's backward (k_gelu_bwd_colsum8; ops.go; the same bits; folded is the default since session 19's whole suite)
//	GODDP_XENT_SMEM=0 the loss head's cross-entropy reads each row of 16-bit logits twice (k_xent), not once from shared memory (k_xent_sm; ops.go; the same bits; once is the default since session 19's whole suite)
//	GODDP_LN_BWD_EARLY=0 the one-pass LayerNorm backward loads the dx row it adds into after the warp's sums (k_ln_bwd8f_K), not with x and dy (k_ln_bwd8fe_K; ops.go; the same bits; early is the default since session 19's runs)
//	GODDP_BGRAD_EPI=0 the weight-gradient GEMMs that sum a bias gradient (LinearGradWB) as a plain GEMM and the column sums, not cublasLt's BGRADB epilogue (lt.go; the forward's bias epilogue stays; its test passed on an H100 in session 19, measured −0.3% at b16, noise: off)
//	GODDP_LT_GEMM=0    the plain GEMMs (MatMul, batch 1) through cublasGemmEx, not cublasLt's default epilogue, where GODDP_LT_TUNE tunes them too (lt_gemm.go; within rounding; with the tuner −0.58 ms at b16 on an H100, session 23: the default)
//	GODDP_LT_TUNE=0    each cublasLt matmul plan's algorithm the heuristic's first, not chosen at its first use by timing up to 8 of the heuristic's candidates on the call's operands and kept on disk for the GPU model (lt_tune.go, lt_tune_cache.go; within rounding; with GODDP_LT_GEMM −0.58 ms at b16 on an H100, session 23: the default)
//	GODDP_COLSUM_SPLIT=N the column sums' row slices N times as many (colsumParts; ops.go: the 8-wide kernels that write them, k_gelu_bwd_colsum8 among them, then run N times the blocks; sums grouped otherwise, within rounding; 2 is the default since session 20's H100 A/B: −0.9% at b16, 4 −0.4%)
//	GODDP_PDL=0       the kernels launched without programmatic dependent launch (pdl.go: every kernel of the modules launch reaches opens on griddepcontrol.wait, then lets the next grid's blocks be scheduled; the same bits): unset, it is on where it runs — compute capability 9.0 or later, built against CUDA 12 with a CUDA 12 driver — the default since session 26's whole suite (hopperDefault; −0.26 ms at b16 on an H100, session 25); =1 requires it (New refuses where it cannot run)
//	GODDP_LN_COLSUM=1 a GPT's residual projections' bias gradients summed by the layer norms' backward that writes their output gradient (k_ln_bwd8fs_K, k_colsum_finish3: LayerNormBackwardColSum, tensor.LNBackwardColSummer), their weight gradients plain GEMMs instead of cublasLt's BGRADB ones (ops.go; dx, dw, db the bits of the default kernels, the bias gradients within rounding; predicted −0.3..−0.5 ms at b16 from session 26's profile: docs/perf-gpu.md; not yet run on a GPU: off)
//	GODDP_IPC_WAIT=stream the IPC all-reduce's ranks wait for each other by their streams, not in the
//	                  kernel (ipc_pace.go; read at each NewIPCReducer; its tests passed on an H100,
//	                  and it measured ~5.5 ms a bucket under MPS: off)
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

// sgdMulti reports whether SGD takes one launch (tensor.MultiSGD): 108 launches of a ResNet-50
// step become one (0.69 -> 0.21 ms on an H100, docs/perf-resnet-gpu.md;
// TestCUDA_sgdMultiMatchesPerRun: the per-run bits). The default since session 17, when the whole
// `-tags cuda` suite passed with it on an H100; GODDP_SGD_MULTI=0 keeps a launch per run. Read at
// each optimizer's construction, so a test can set it.
func sgdMulti() bool { return os.Getenv("GODDP_SGD_MULTI") != "0" }

// clipFused reports whether gradient clipping is folded into the passes around it: the norm's
// squares summed by the scaler's unscale-and-check pass (tensor.UnscaleSquarer, k_unscale_sumsq:
// one read of the gradients and one read-back instead of two each) and the clip factor multiplied
// in AdamW's kernels (tensor.GradScaledAdamW: k_adamw and k_adamw_multi, Scale's very product),
// instead of a scaling pass of its own. The same bits (TestCUDA_adamwScaledIsScaleThenStep,
// TestCUDA_unscaleCheckNormSameBits). The default since session 17: the whole -tags cuda suite
// passed with it on an H100 and GPT-2 small's ddptrain step at batch 16 fell 42.98 -> 42.70 ms
// (the optimizer span 2.48 -> 2.00, the check's 0.46 -> 0.58: docs/perf-gpu.md);
// GODDP_CLIP_FUSED=0 keeps the passes. Read at each call, so a test can set it.
func clipFused() bool { return os.Getenv("GODDP_CLIP_FUSED") != "0" }

// unscaleFold reports whether the loss scaler's unscale is folded into AdamW's step
// (tensor.UnscaleFolder): the check and the clipping norm read the gradients without writing them
// back (k_check_sumsq instead of k_unscale_sumsq, k_check instead of k_unscale) and k_adamw_us
// multiplies each gradient by the inverse scale before the clip factor, the values the unscale
// would have stored: the same bits (TestCUDA_unscaleFoldSameBits), one write of the f32 gradient
// slab fewer a step (~0.3 ms at GPT-2 small on an H100: docs/perf-gpu.md, "Plan: the unscale
// folded into AdamW"). The default since session 21: the whole -tags cuda suite ran with it on an
// H100 (TestCUDA_unscaleFoldSameBits, the worker's and model's tests passed) and ddptrain's step
// with it and GODDP_STEP_END_WAIT's new default fell 37.88 -> 37.63 ms at b16, 20.08 -> 19.83 at
// b8 (median of 3, alternating); GODDP_UNSCALE_FOLD=0 keeps the unscaling pass. Read at each
// call, so a test can set it.
func unscaleFold() bool { return os.Getenv("GODDP_UNSCALE_FOLD") != "0" }

// biasFold reports whether the bias adds are folded into the passes that read their results
// (tensor.BiasFolder: a GPT block's fc bias into GELU, the attention's and the MLP's projection
// biases into the residual adds): ~2.4 GB less traffic and 36 launches fewer a GPT-2 small step at
// b16 (docs/perf-gpu.md, "Plan: the bias adds folded"). The same bits
// (TestCUDA_biasFoldSameBits). The default since session 18: the whole -tags cuda suite passed
// with it on an H100, and the model bench fell 41.40 -> 40.84 ms at b16 (21.85 -> 21.56 at b8);
// GODDP_BIAS_FOLD=0 keeps the passes. Read at each call, so a test can set it.
func biasFold() bool { return os.Getenv("GODDP_BIAS_FOLD") != "0" }

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

// streamConnections sets CUDA_DEVICE_MAX_CONNECTIONS=32 (the most) before the driver starts,
// where GODDP_IPC_WAIT=stream and the user has not set it: the driver multiplexes a context's
// streams onto that many hardware queues (8 by default), and a stream waiting on a value
// (cuStreamWaitValue32, the paced meetings) blocks every other stream of its queue — among them,
// where streams outnumber queues, the abort stream whose writes would release the wait. Seen on
// the H200 (session 16): ranks sharing one process and context, 63 streams, a stopped peer, and
// every rank hung in Close with the releases never run. The driver reads the variable when it
// starts: a process whose first device was made without it keeps the default (tests set it
// first: ddp/main_cuda_test.go).
func streamConnections() error {
	paced, err := ipcWaitStream()
	if err != nil || !paced {
		return err
	}
	if _, set := os.LookupEnv("CUDA_DEVICE_MAX_CONNECTIONS"); !set {
		return os.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
	}
	return nil
}

// flashOptions reads the attention kernels' compile-time choices for issue 35's A/B (Nsight
// Compute on the H200, session 16: the fused kernels hold 132 (forward), 168 (dq) and 218 (dk/dv)
// registers a thread, so 3, 3 and 2 blocks of 4 warps fit an SM — 12.5–18.75% occupancy, one
// instruction every 4.3–5 cycles a warp — and the SMs sit idle 16% of the forward's time, its last
// wave the longest tiles of the last heads):
//
//	GODDP_FLASH_TILE_MAJOR=0|1     1 (the default): the grid (B·H, tiles), the longest tiles of
//	                               every head first; 0: (tiles, B·H), as before session 17
//	GODDP_FLASH_MINBLOCKS=F,Q,K    __launch_bounds__' blocks per SM for the forward, dq and dk/dv
//	                               kernels (each 1..8, 0 no cap; e.g. 4,4,3: at most 128, 128, 168
//	                               registers; unset: 0,0,3, dk/dv capped, since session 23)
//	GODDP_FLASH_EX2=1              the exponentials as one ex2.approx.ftz each instead of exp2f's
//	                               compare, instruction and two multiplies (flash_kernels.go's fexp2;
//	                               not yet run on a GPU)
//	GODDP_FLASH_PACK2=1            a pair of floats packed to 16 bits by one cvt.rn.f16x2.f32
//	                               (bf16x2) instead of two cvt, a shift and an or (pack2; the same
//	                               bits; not yet run on a GPU)
//
// Measured on an H100 in session 17 (docs/perf-gpu.md): tile-major −0.6% at batch 16 and −2%
// at batch 8 in two calls, the same bits (TestCUDA_flashOptionsSameBits), so it is the default;
// MINBLOCKS 4,4,3 spills dq and dk/dv (88 and 24 local bytes) and is +0.4% slower, the forward
// alone at 4 blocks (4,3,2) no faster: unset (no register cap) stays the default.
//
// Since session 23 the dk/dv kernels are capped at 3 blocks an SM by default
// (flashMinBlocksDefault "0,0,3"; 0 is no cap): k_flash_bwd_dkdv_ds holds 224 registers a thread
// uncapped, 2 blocks an SM; at 3 its profile went 4.36 → 4.01 ms and the model bench −0.20 ms
// at b16 (median of 4 alternating rounds, −0.19 in a second call), −0.13 at b8, on an H100.
const flashMinBlocksDefault = "0,0,3"

func flashOptions() (opts []string, tileMajor bool, err error) {
	// Each 0/1 variable: its default when unset, and the define it passes when on.
	for _, f := range []struct {
		name, define string
		def          bool
		on           *bool
	}{
		{"GODDP_FLASH_TILE_MAJOR", "-DFLASH_TILE_MAJOR=1", true, &tileMajor},
		{"GODDP_FLASH_EX2", "-DFLASH_EX2_FTZ=1", true, nil},
		{"GODDP_FLASH_PACK2", "-DFLASH_PACK_X2=1", false, nil},
		{"GODDP_FLASH_MASK_SPLIT", "-DFLASH_MASK_SPLIT=1", false, nil},
	} {
		on := f.def
		switch v := os.Getenv(f.name); v {
		case "":
		case "0", "1":
			on = v == "1"
		default:
			return nil, false, fmt.Errorf("cuda: %s=%q: want 0 or 1", f.name, v)
		}
		if on {
			opts = append(opts, f.define)
		}
		if f.on != nil {
			*f.on = on
		}
	}
	v := os.Getenv("GODDP_FLASH_MINBLOCKS")
	if v == "" {
		v = flashMinBlocksDefault
	}
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return nil, false, fmt.Errorf("cuda: GODDP_FLASH_MINBLOCKS=%q: want three counts (forward,dq,dkdv), e.g. 4,4,3", v)
	}
	for i, name := range []string{"FLASH_FWD_MINB", "FLASH_DQ_MINB", "FLASH_DKDV_MINB"} {
		n, err := strconv.Atoi(strings.TrimSpace(parts[i]))
		if err != nil || n < 0 || n > 8 {
			return nil, false, fmt.Errorf("cuda: GODDP_FLASH_MINBLOCKS=%q: %q is not a count from 0 (no cap) to 8", v, parts[i])
		}
		if n > 0 {
			opts = append(opts, fmt.Sprintf("-D%s=,%d", name, n)) // __launch_bounds__(128 ,n)
		}
	}
	return opts, tileMajor, nil
}

// colsumVec reports whether GODDP_COLSUM_VEC=1 asked for k_colsum_part8 in colSum (BiasGrad):
// 16-byte loads, four rows in flight a thread, where k_colsum_part reads 2 bytes a thread a row
// (GPT-2 small's bias gradients read ~2.7 GB a step at batch 16: ~0.8 ms at HBM's rate). The
// same sums in the same order: TestCUDA_colsumVecSameBits (passed on an H100, session 17). Measured on an
// H100 in session 15: −0.3% at batch 16, inside the noise (docs/perf-gpu.md), so it stays off.
// Read at each call, so a test can set it.
func colsumVec() bool { return os.Getenv("GODDP_COLSUM_VEC") == "1" }

// colsumFused reports whether the finishing launches are folded away: the column
// sums (BiasGrad) in one launch, k_colsum_partfin, whose last block of each column block adds the
// parts in k_colsum_finish's order, and a LayerNorm backward's dw and db finished together,
// k_colsum_finish2 (the same bits: TestCUDA_colsumFusedSameBits, TestCUDA_lnFinishFusedSameBits).
// 73 launches fewer a GPT-2 small step (k_colsum_finish: 0.9 ms of events for 98 launches at
// b16 on an H100, session 17). The default since session 19: the whole -tags cuda suite passed
// with it on an H100 (its LayerNorm test fixed after session 18's), the model bench 40.66 -> 40.44
// ms at b16 (21.25 -> 21.29 at b8, noise); GODDP_COLSUM_FUSED=0 keeps k_colsum_finish. Read at
// each call, so a test can set it.
func colsumFused() bool { return os.Getenv("GODDP_COLSUM_FUSED") != "0" }

// lnVec reports whether LayerNorm's forward runs 8 wide (k_ln_fwd8_K, C a multiple of 256 up to
// 1024): a warp per row holding the row in registers, one read and one write of it, where
// k_layernorm reads it three times 2 bytes a lane at a time (25 launches at 32 µs a GPT-2 small
// step at b16 on an H100, ~1.5 TB/s: session 17's profile). The sums are grouped otherwise, so
// within rounding of k_layernorm (TestCUDA_layerNorm8MatchesScalar), not its bits. The default
// since session 18: the whole -tags cuda suite passed with it on an H100, the model bench
// 41.40 -> 41.22 ms at b16 (21.85 -> 21.83 at b8), and with the bias folds and the fused column
// sums 40.26 (21.29). GODDP_LN_VEC=0 takes k_layernorm. Read at each call, so a test can set it.
func lnVec() bool { return os.Getenv("GODDP_LN_VEC") != "0" }

// xentSmem reports whether the cross-entropy's gradient launch reads each row once (k_xent_sm: the row's 16-bit logits kept in shared memory, V·2 bytes a block, two
// blocks an SM for GPT-2's 50304) where k_xent reads it twice: 1.65 GB less traffic a GPT-2 small
// step at b16 (k_xent: 1.81 ms for 4.95 GB, ~2.7 TB/s, in session 17's H100 profile). The same
// bits (TestCUDA_xentSmemSameBits). The default since session 19: the whole -tags cuda suite
// passed with it on an H100, the model bench 40.66 -> 40.10 ms at b16 (21.25 -> 21.29 at b8,
// noise); GODDP_XENT_SMEM=0 keeps k_xent. Read at each call, so a test can set it.
func xentSmem() bool { return os.Getenv("GODDP_XENT_SMEM") != "0" }

// biasEpilogue reports whether a GPT takes cublasLt's bias-only epilogues in a
// GPT without model.gemm_epilogue (tensor.BiasEpiloguer): the QKV bias add in its GEMM (12 ×
// 150 MB of k_addbias8 traffic at b16) and the bias gradients of the QKV and the two projections
// in their weight-gradient GEMMs (12 × 125 MB of column-sum reads), GELU and the folds kept as
// passes. cublasLt's GEMMs are not cuBLAS's, so the numbers move within rounding. All the
// epilogues together measured no faster (session 11, the GELU ones among them); this bias-only form
// is the default since session 19: the whole -tags cuda suite passed with it on an H100, the model
// bench 40.66 -> 39.85 ms at b16 (21.25 -> 21.15 at b8). GODDP_BIAS_EPILOGUE=0 keeps the passes.
// Read when a model is built.
func biasEpilogue() bool { return os.Getenv("GODDP_BIAS_EPILOGUE") != "0" }

// embSorted reports whether GODDP_EMB_SORTED=1 asked for the deterministic embedding backward: a
// stable counting sort of the positions by token (k_emb_sort, one block) and each token's rows
// added into its dwte row in position order (k_emb_bwd_sorted) — the CPU device's order and bits,
// the same run after run — where k_embedding_bwd_wte adds atomically in whatever order the
// hardware takes (which keeps a GPT's GPU runs from being bit-reproducible: docs/perf-memory.md).
// TestCUDA_embeddingSortedMatchesCPU passed on an H100 in session 19, and with it GPT-2 small's
// sharded and unsharded ddptrain runs ended with one param_sha256 (docs/perf-memory.md); it
// measured 40.66 -> 40.70 ms at b16 and 21.25 -> 21.48 at b8, so it stays off: the price of
// bit-reproducible runs. Read at each call, so a test can set it.
func embSorted() bool { return os.Getenv("GODDP_EMB_SORTED") == "1" }

// lnBwdFused reports whether the 8-wide LayerNorm backward runs in one
// pass (k_ln_bwd8f_K: dx as k_ln_bwd_dx8_K computes it and the dw, db parts as k_ln_dwdb8 does,
// from one read of x and dy): 25 × 50 MB of reads and 25 launches fewer a GPT-2 small step at
// b16. The same bits (TestCUDA_lnBackwardFusedSameBits). The default since session 19: the whole
// -tags cuda suite passed with it on an H100, the model bench 40.66 -> 40.49 ms at b16 alone (21.25
// -> 21.42 at b8: alone it is no faster there, with the others the whole set is: 20.84);
// GODDP_LN_BWD_FUSED=0 keeps two launches. Read at each call, so a test can set it.
func lnBwdFused() bool { return os.Getenv("GODDP_LN_BWD_FUSED") != "0" }

// resNormFold reports whether a GPT's residual sums and the layer
// norms that read them are made in one pass (tensor.ResidualNormer, k_addbias_add_ln8_K: the sum written
// and normalised from the registers): 25 reads of the 25 MB residual stream and 25 launches fewer a
// GPT-2 small step at b16. The same bits as AddBiasAdd then the 8-wide LayerNorm
// (TestCUDA_residualNormSameBits); where LayerNorm would not take k_ln_fwd8_K, the two operations.
// The default since session 19: the whole -tags cuda suite passed with it on an H100, the model
// bench 40.66 -> 40.44 ms at b16 (21.25 -> 21.26 at b8); GODDP_RESNORM_FOLD=0 keeps the two
// operations. Read when a model is built (FusesResidualNorm) and at each call.
func resNormFold() bool { return os.Getenv("GODDP_RESNORM_FOLD") != "0" }

// geluDBFold reports whether the fc bias gradient's column sums are made in
// GELU's backward pass (tensor.GELUBiasGrader, k_gelu_bwd_colsum8): the sums read the gradient as
// the pass writes it instead of again from memory, 12 × 100 MB and 24 launches fewer a GPT-2 small
// step at b16. The same bits (TestCUDA_geluBiasGradSameBits). The default since session 19: the
// whole -tags cuda suite passed with it on an H100, the model bench 40.66 -> 40.34 ms at b16 (21.25
// -> 21.35 at b8, noise); GODDP_GELU_DB_FOLD=0 keeps the pass. Read when a model is built
// (FusesGELUBiasGrad) and at each call.
func geluDBFold() bool { return os.Getenv("GODDP_GELU_DB_FOLD") != "0" }

// lnBwdEarly reports whether the one-pass LayerNorm backward
// loads the row of dx it adds into together with x and dy (k_ln_bwd8fe_K), where k_ln_bwd8f_K
// loads it after the warp's two reductions: session 19's profile had k_ln_bwd8f_3 at 1.62 ms for
// 25 launches at b16 on an H100 (2.5 GB: ~1.5 TB/s, half of the other passes), a warp's loads
// waiting on each other row after row. The same arithmetic, so the same bits
// (TestCUDA_lnBackwardFusedSameBits compares it too); 24 more live registers a thread for C = 768.
// The default since session 19: on an H100 the kernel fell 1.62 -> 1.24 ms a b16 step and the model
// bench 37.64 -> 37.06 ms (19.91 -> 19.84 at b8); with it on, model/cuda's and model's CUDA tests
// passed in one call and ddp's and worker's in the next (the whole -tags cuda suite).
// GODDP_LN_BWD_EARLY=0 keeps k_ln_bwd8f_K. Read at each call, so a test can set it.
func lnBwdEarly() bool { return os.Getenv("GODDP_LN_BWD_EARLY") != "0" }

// bgradEpilogue reports whether LinearGradWB takes cublasLt's BGRADB epilogue (the default);
// GODDP_BGRAD_EPI=0 makes it a plain GEMM and the column sums (tensor.ComposeLinearGradWB). Session
// 19's profile at b16 on an H100 had the epilogue GEMMs slower than plain ones of their size: the
// QKV's weight gradient 1.59 ms for 12 (≈ 440 TFLOP/s), the attention projection's 0.76 (≈ 305),
// where the fc's plain one runs at ≈ 680; the column sums they save read 75 and 25 MB a layer
// (~0.35 and ~0.12 ms a step). Measured on an H100 in session 19: 37.64 -> 37.52 ms at b16, 19.91
// -> 19.84 at b8 (inside the noise), so the epilogue stays (TestCUDA_bgradEpilogueOffComposes
// passed). Read at each call, so a test can set it.
func bgradEpilogue() bool { return os.Getenv("GODDP_BGRAD_EPI") != "0" }

// kernelOptions are the main kernel module's compile-time options (and the bf16 module's):
// -DGELU_TANH_APPROX=1 under GODDP_GELU_TANH_APPROX=1 (kernels.go: the 8-wide GELU passes' tanh by
// one tanh.approx.f32). Session 19's b16 profile on an H100: k_addbias_gelu8 1.31 ms for ~2.4 GB
// (~1.8 TB/s) and k_gelu_bwd_colsum8 1.52 ms for 3.6 GB, both well under the 2.5–2.8 TB/s the
// plain passes reach, with ~30 instructions an element (tanhf ~20 of them). Predicted
// −0.3..−0.5 ms a step at b16. -DXENT_EX2=1 under GODDP_XENT_EX2=1 (kernels.go: the
// cross-entropy's exponentials by one ex2.approx.ftz each, not expf: k_xent_sm 1.52 ms at b16
// where its bytes need ~1.0; predicted −0.15..−0.3 ms at b16). Neither yet run on a GPU. Read
// when the module loads; anything but "1" is off. Measured on an H100 in session 21 (model bench,
// b16, median of 3): GELU's +0.6%, the cross-entropy's −0.05% (noise): both off.
func kernelOptions() []string {
	var opts []string
	if os.Getenv("GODDP_GELU_TANH_APPROX") == "1" {
		opts = append(opts, "-DGELU_TANH_APPROX=1")
	}
	if os.Getenv("GODDP_XENT_EX2") == "1" {
		opts = append(opts, "-DXENT_EX2=1")
	}
	return opts
}

// flashDeltaFold reports whether GODDP_FLASH_DELTA_FOLD=1 asks the attention backward to make its
// row sums delta = Σ_d dy·y inside the dq kernel (k_flash_bwd_dq_delta: each block its 64 rows,
// before its main loop, while its first tiles load) and to launch it before the dk/dv kernel, which
// reads them, instead of a pass of their own. Session 19's profile (H100, b16): k_flash_bwd_delta
// 0.47 ms for 12 launches, reading dy and y (50 MB a layer, ~1.3 TB/s: its threads each read one
// row's 128 bytes of each, 16 bytes at a time). Predicted −0.3..−0.4 ms a step at b16 (the dq
// kernel's prologue ~0.05–0.1 ms more); the same bits (delta_row is the one sum both call:
// TestCUDA_flashDeltaFoldSameBits, passed on an H100 in session 20). Measured there: the kernels
// 2.90 → 2.58 ms, the step −0.1 ms at b16 in two calls, inside the noise: off. Read at each call.
func flashDeltaFold() bool { return os.Getenv("GODDP_FLASH_DELTA_FOLD") == "1" }

// flashDS reports whether the attention backward computes dS once (the default; GODDP_FLASH_DS=0
// recomputes it for dq, the kernels of session 19): the
// dk/dv kernel stores each (query tile, key tile) block of dSᵀ as the f16 (bf16) values its dK
// product takes (k_flash_bwd_dkdv_ds), and dq is then Σ dS·K from them (k_flash_bwd_dq_ds) — where
// k_flash_bwd_dq recomputes the scores, their exponentials and dO·Vᵀ for every block a second time.
// The same bits (k_flash_bwd_dq packs the very values; TestCUDA_flashDSSameBits). Session 19's b16
// profile on an H100: dq 2.34 ms, dk/dv 3.75, at ~165–195 TFLOP/s of their recomputing products.
// The blocks cost memory: B·H·n(n+1)/2 · 8 KiB for n = ⌈T/64⌉ query tiles (GPT-2 small at b16:
// 214 MB, freed after each layer's backward), written by dk/dv and read back by dq (2.6 GB a b16
// step, ~0.9 ms of HBM at 3 TB/s). Predicted: dq 2.34 → ~1.0 ms, dk/dv +0.2..0.4 for the stores:
// −0.6..−1.2 ms a step at b16, −0.3..−0.6 at b8. Measured on an H100 in session 21: the same bits,
// dq 2.34 → 1.59 ms but dk/dv 3.78 → 4.91 (its stores), the step +0.45 ms at b16: off. Then the
// stores went through shared memory in 16-byte pieces: in session 22 on an H100 the same bits,
// the model bench −0.31 ms at b16 (36.77 → 36.46, median of 3 alternating) and −0.06 at b8, the
// whole suite passed with it: the default. Read at each call.
func flashDS() bool { return os.Getenv("GODDP_FLASH_DS") != "0" }

// flashDelta8 reports whether the backward's row sums Σ dy·y run eight lanes a row (the default;
// GODDP_FLASH_DELTA8=0: one thread a row, k_flash_bwd_delta): k_flash_bwd_delta8, coalesced
// 16-byte loads, the sum chained across the lanes in k_flash_bwd_delta's order, so the same bits.
// Session 22's b16 profile on an H100: k_flash_bwd_delta 0.48 ms for 12 launches reading 2 × 25
// MB each (~1.25 TB/s); predicted 0.2–0.25 ms. Measured in session 23 on an H100: its test
// passed (the same bits) with the whole suite, the kernel 0.36 ms; the model bench's step moved
// −0.04 ms at b16 (median of 3, inside the noise). Read at each call.
func flashDelta8() bool { return os.Getenv("GODDP_FLASH_DELTA8") != "0" }

// flashDQPair reports whether GODDP_FLASH_DQ_PAIR=1 asks for the dS-once dq kernel with two query
// tiles a block (k_flash_bwd_dq_ds2, 8 warps: each K tile fetched once for both; the same bits:
// its test passed on an H100 in session 25; not measured). Session 23's b16 profile on an H100: k_flash_bwd_dq_ds 1.58 ms with 6
// blocks an SM at 80 registers, reading 2.6 GB of dS from HBM (~1.6 TB/s) and 3.1 GB of K tiles
// from L2; loads two tiles ahead (a third buffer) changed nothing, so it is not waiting on its
// loads' latency. If L2's bandwidth bounds it, halving the K traffic gives ~1.2 ms: predicted
// −0.2..−0.4 ms a b16 step, nothing if it does not. Read at each call.
func flashDQPair() bool { return os.Getenv("GODDP_FLASH_DQ_PAIR") == "1" }

// flashWGMMA reads GODDP_FLASH_WGMMA (flash_wgmma.go; flashWGFor): 0 none, unset the default
// (none, or fwdp,dkdv,dq on compute capability 9.0 under hopperDefault), 1 fwd, dkdv and dq, or
// a comma list of those and fwdp (the forward with each tile's scores issued before the previous
// tile's P·V is added: k_flash_wg_fwdp, 64-row blocks) and dkdv128 (dk/dv 128 keys a block, two
// warpgroups sharing each query tile's loads: k_flash_wg_dkdv128). Predicted at b16 on an H100, if
// the kernels are issue-bound as session 16 measured the mma.sync ones: the forward 2.2 → ~1.6 ms,
// dk/dv 4.0 → 2.8–3.3, dq 1.6 → 1.3–1.5, −1..−2 ms a step; measured in session 25 (H100): 2.16 →
// 1.40 (fwdp), 4.01 → 3.17, 1.61 → 1.48, −1.76 ms a step (35.75 → 33.99; docs/perf-gpu.md: the
// plan, the counts, the runs). Read at each call (checkEnv refuses a bad value at the device's
// start).
func (d *Device) flashWGMMA() flashWGParts {
	return flashWGFor(flashWGMMAValue(), d.flash, d.major, d.minor)
}

// lnColSum reports whether a GPT sums its residual projections' bias gradients in the layer norms'
// backward (FoldsLNColSums): GODDP_LN_COLSUM=1 (not yet run on a GPU). Read when a model is built.
func lnColSum() bool { return os.Getenv("GODDP_LN_COLSUM") == "1" }

// pdlValue is GODDP_PDL's value as set (pdlFor; read once, by New).
func pdlValue() string { return os.Getenv("GODDP_PDL") }

// flashWGMMAValue is GODDP_FLASH_WGMMA's value as set (for messages).
func flashWGMMAValue() string { return os.Getenv("GODDP_FLASH_WGMMA") }

// ltGemmOn reports whether the plain GEMMs run through cublasLt (the default; GODDP_LT_GEMM=0:
// cublasGemmEx), so that the tuner (ltTune) chooses their algorithms too (lt_gemm.go). Read at
// each GEMM.
func ltGemmOn() bool { return os.Getenv("GODDP_LT_GEMM") != "0" }

// ltTune reports whether each cublasLt plan's algorithm is chosen by timing at the plan's first
// use and kept on disk for the GPU model (the default; GODDP_LT_TUNE=0: the heuristic's first;
// lt_tune.go, lt_tune_cache.go). With GODDP_LT_GEMM, measured on an H100 in session 23: −0.58 ms
// at b16 (36.91 → 36.32, median of 4 alternating), −0.05 at b8; the tuner kept another candidate
// for five of GPT-2 small's plain GEMM plans (the lm_head's two and the MLP's), none of the
// epilogue plans. Read at each plan's first use.
func ltTune() bool { return os.Getenv("GODDP_LT_TUNE") != "0" }

// colsumSplit is GODDP_COLSUM_SPLIT: how many times colsumParts' default number of row slices the
// column sums take (1 to 16; unset is 2; New refuses anything else: env_check.go). 1 fills the GPU with the scalar
// kernel's blocks of 32 columns, so the 8-wide kernels that share its slices — the GELU
// backward with the fc's bias gradient, k_gelu_bwd_colsum8, 1.52 ms of session 19's b16 profile
// on an H100 for 3.6 GB (~2.4 TB/s) — run one block of 8 warps an SM, 32 KB of loads in flight;
// 4 gives them four. The parts are grouped otherwise, so the sums change within rounding (every
// kernel takes the same split: the fold keeps the separate passes' bits,
// TestCUDA_geluBiasGradSameBits), and k_colsum_finish adds N times the parts. Predicted at 4:
// k_gelu_bwd_colsum8 1.52 -> ~1.25 ms at b16. Measured on an H100 in session 20 (the model bench,
// median of 3): b16 37.76 -> 37.43 ms at 2, 37.61 at 4; b8 unchanged (19.92, 19.97, 19.95); its
// test passed (TestCUDA_geluBiasGradSameBits at 1 and 4). So 2 is the default. Read at each call.
func colsumSplit() int {
	n, err := strconv.Atoi(os.Getenv("GODDP_COLSUM_SPLIT"))
	if err != nil || n < 1 || n > 16 {
		return 2
	}
	return n
}

// flashCarveoutUnset is flashCarveout's "not set": the driver's default (no preference).
const flashCarveoutUnset = -2

// flashCarveout is GODDP_FLASH_CARVEOUT: -1 (no preference) to 100 (the most shared memory), the
// carveout the f16 attention kernels ask for when loaded (cudadrv.Function.SetCarveout). An A/B
// for issue 35: whether the driver's default split of the SM's L1 and shared memory limits how
// many attention blocks are resident (each holds 36 KiB of shared memory). Unset:
// flashCarveoutUnset. Measured on an H200 in session 16: 100 changed nothing (the kernels are
// register-bound).
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
