package tensor

// WireStager is a GradStager whose staging plans can use either 16-bit wire format: F16 (what
// NewGradStaging does) or BF16, for `ddp.wire: bf16`. The plan's Host buffers then hold that
// format's bits; everything else is GradStaging's contract.
type WireStager interface {
	GradStager
	// NewGradStagingWire is NewGradStaging with the staged dtype wire (F16 or BF16; others are an
	// error naming the dtype).
	NewGradStagingWire(grad *Tensor, ranges [][2]int, wire DType) (GradStaging, error)
}
