package tensor

// LNBackwardColSummer is an optional Device ability: a LayerNorm backward that also adds the
// column sums of the dx it leaves (R,C), as stored, into s (C, f32, accumulating as gradients
// do). That dx is a GPT's residual-stream gradient, and its column sums are the bias gradients of
// the block's two residual projections (the attention's and the MLP's output linears), which
// otherwise sum it again in their weight-gradient GEMMs (cublasLt's BGRADB epilogue, ~300–570
// TFLOP/s where the plain GEMMs run ~660: docs/perf-gpu.md, "the bias gradients summed where
// their rows are read"). FoldsLNColSums is its switch; a model takes it only where the
// projections' output gradient is that dx itself (no dropout on the residual branch).
// ComposeLayerNormBackwardColSum is its meaning, and the reference.
type LNBackwardColSummer interface {
	LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s *Tensor)
	FoldsLNColSums() bool
}

// ComposeLayerNormBackwardColSum is LNBackwardColSummer.LayerNormBackwardColSum by
// LayerNormBackward then BiasGrad(s, dx).
func ComposeLayerNormBackwardColSum(d Device, dx, dw, db, dy, x, w, mean, rstd, s *Tensor) {
	d.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
	d.BiasGrad(s, dx)
}
