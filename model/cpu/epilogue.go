package cpu

import "github.com/goddp/goddp/model/tensor"

// The CPU device's tensor.EpilogueDevice composes its own operations, so a model that asks for
// fused epilogues computes bit-identical results on the CPU (the reference the CUDA device's
// cublasLt epilogues are tested against).
var _ tensor.EpilogueDevice = (*Device)(nil)

func (c *Device) LinearBias(y, x, w, b *tensor.Tensor) { tensor.ComposeLinearBias(c, y, x, w, b) }

func (c *Device) LinearBiasGELU(y, pre, x, w, b *tensor.Tensor) {
	tensor.ComposeLinearBiasGELU(c, y, pre, x, w, b)
}

func (c *Device) LinearGradWB(dw, db, dy, x *tensor.Tensor) {
	tensor.ComposeLinearGradWB(c, dw, db, dy, x)
}

func (c *Device) LinearGradDGELU(dx, db, dy, w, pre *tensor.Tensor) {
	tensor.ComposeLinearGradDGELU(c, dx, db, dy, w, pre)
}

// BiasEpilogues: a GPT on the CPU device takes the bias-only epilogues (tensor.BiasEpiloguer),
// which compose the same operations (the same bits), so the model's path through them is tested;
// GODDP_BIAS_EPILOGUE=0 turns them off (env.go).
func (c *Device) BiasEpilogues() bool { return biasEpilogue() }

var _ tensor.BiasEpiloguer = (*Device)(nil)
