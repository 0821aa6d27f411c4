package tensor

// EpilogueDevice is an optional Device ability: a Linear layer's GEMM with its bias add, its GELU
// (tanh form) and its bias gradient done in the GEMM's epilogue instead of by separate passes
// over the output (issue 35). The CUDA device has it through cublasLt (model/cuda/lt.go); the CPU
// device composes its own MatMul, AddBias, GELU, GELUBackward and BiasGrad (ComposeLinearBias
// and the others below), which is the reference the CUDA device is tested against. A model
// uses it when its configuration asks (model.gemm_epilogue), or its bias-only part where the
// device asks (BiasEpiloguer): a fused epilogue adds the bias
// before rounding the product to a 16-bit output, so its numbers differ from the separate
// kernels' in the last bits.
//
// Shapes, as LinearForward's: x (R,In) (any leading dims), w (Out,In), b (Out), y and pre (R,Out).
// The products are rounded once to the output's dtype; gradients dw and db are f32 and
// accumulate, as Device's parameter gradients always do.
type EpilogueDevice interface {
	Device
	// LinearBias: y = x·wᵀ + b.
	LinearBias(y, x, w, b *Tensor)
	// LinearBiasGELU: pre = x·wᵀ + b and y = GELU(pre), with pre kept for the backward
	// (LinearGradDGELU). y and pre have one dtype.
	LinearBiasGELU(y, pre, x, w, b *Tensor)
	// LinearGradWB: dw (Out,In) += dyᵀ·x and db (Out) += column sums of dy (R,Out).
	LinearGradWB(dw, db, dy, x *Tensor)
	// LinearGradDGELU is the backward of a Linear whose input went through a GELU: dx (R,In) =
	// GELU'(pre)⊙(dy·w) (overwritten), with dy (R,Out), w (Out,In) and pre (R,In) the GELU's
	// input; db (In) += column sums of dx (the bias gradient of the layer that made pre).
	LinearGradDGELU(dx, db, dy, w, pre *Tensor)
}

// BiasEpiloguer is an optional ability of an EpilogueDevice: BiasEpilogues reports whether a model
// without model.gemm_epilogue should still take the epilogues that add a bias or sum a bias
// gradient where no pass of its own would fold them — a GPT block's QKV bias add (LinearBias),
// and its linears' bias gradients in their weight-gradient GEMMs (LinearGradWB) — keeping GELU
// and the bias folds as passes (BiasFolder, GELUBiasGrader). The CPU device: on unless
// GODDP_BIAS_EPILOGUE=0 (the same bits: it composes); the CUDA device: the same (cublasLt's GEMMs,
// within rounding of cuBLAS's).
type BiasEpiloguer interface {
	BiasEpilogues() bool
}

// ComposeLinearBias is EpilogueDevice.LinearBias by separate operations (MatMul, AddBias): the
// CPU device's implementation and the fallback of a device whose fused form refuses a case.
func ComposeLinearBias(d Device, y, x, w, b *Tensor) {
	d.MatMul(y, x, w, false, true, 1, 0)
	d.AddBias(y, b)
}

// ComposeLinearBiasGELU is LinearBiasGELU by MatMul, AddBias and GELU.
func ComposeLinearBiasGELU(d Device, y, pre, x, w, b *Tensor) {
	ComposeLinearBias(d, pre, x, w, b)
	d.GELU(y, pre)
}

// ComposeLinearGradWB is LinearGradWB by MatMul (beta 1) and BiasGrad.
func ComposeLinearGradWB(d Device, dw, db, dy, x *Tensor) {
	d.MatMul(dw, dy, x, true, false, 1, 1)
	d.BiasGrad(db, dy)
}

// ComposeLinearGradDGELU is LinearGradDGELU by MatMul, GELUBackward (in place) and BiasGrad.
func ComposeLinearGradDGELU(d Device, dx, db, dy, w, pre *Tensor) {
	d.MatMul(dx, dy, w, false, false, 1, 0)
	d.GELUBackward(dx, dx, pre)
	d.BiasGrad(db, dx)
}
