// Package cpu is goddp's CPU device: plain Go, no cgo, every operation of tensor.Device run across
// runtime.GOMAXPROCS goroutines and finished when it returns (so Sync waits for nothing). It is the
// reference the CUDA device is tested against, and the device of tests and CPU training runs.
//
//	cpu.go         Device and New; memory is the embedded tensor.Pool over Go slices, so the
//	               counters mean what they mean on the GPU; element access; host transfers, fills,
//	               copies, elementwise
//	ops.go         activations, dropout, layer norm, embeddings, softmax and the attention layout,
//	               cross-entropy, reductions, the loss scaler's check, AdamW and SGD, the bias
//	               folds (tensor.BiasFolder, tensor.GELUBiasGrader, tensor.ResidualNormer)
//	matmul.go      MatMul, BatchedMatMul, AddBias, BiasGrad: shapes checked, work done by gemm.go
//	gemm.go        a packed, blocked SGEMM organised like BLIS (f16 and bf16 operands widened while
//	               packing)
//	gemm_amd64.go  the AVX-512 and AVX2+FMA micro-kernels in gemm_amd64.s, written by
//	               gemm_asmgen.go (go generate ./model/cpu/); gemm_other.go elsewhere
//	math.go        float32 exp and GELU, a few ulp from float64
//	flash.go       the reference FlashAttention (FlashAttentionFast is false here)
//	env.go         the environment it reads (GODDP_BIAS_FOLD, GODDP_GELU_DB_FOLD, GODDP_BIAS_EPILOGUE,
//	               GODDP_RESNORM_FOLD, GODDP_UNSCALE_FOLD, GODDP_LN_COLSUM)
//
// f16 and bf16 tensors are stored as their 16 bits and computed in f32: read widens, commit
// rounds to nearest even (half.Format: one code path for both formats).
//
// It imports only model/tensor and model/half. Results are deterministic: reductions keep one
// partial per chunk and combine them in a fixed order, so they do not depend on timing.
package cpu
