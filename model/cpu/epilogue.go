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

// LayerNormBackwardColSum is tensor.LNBackwardColSummer's op by its composition (LayerNormBackward,
// then BiasGrad of the dx it left): the same bits as the residual projections summing their bias
// gradients from that dx themselves.
func (c *Device) LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s *tensor.Tensor) {
	tensor.ComposeLayerNormBackwardColSum(c, dx, dw, db, dy, x, w, mean, rstd, s)
}

// FoldsLNColSums: a GPT on the CPU device takes LayerNormBackwardColSum, so the model's path
// through it is tested; GODDP_LN_COLSUM=0 turns it off (env.go).
func (c *Device) FoldsLNColSums() bool { return lnColSum() }

var _ tensor.LNBackwardColSummer = (*Device)(nil)
