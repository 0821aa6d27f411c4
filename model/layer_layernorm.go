package model

import "github.com/goddp/goddp/model/tensor"

// LayerNormEps is the ε in y = (x − mean)·rstd·w + b, rstd = 1/√(var + ε).
const LayerNormEps = 1e-5

// LayerNorm normalises over the last dimension with gain W and bias B (both (C), f32 even under
// mixed precision: statistics and gains stay in f32; x and y may be f16).
type LayerNorm struct {
	W, B *Param // (C)
	C    int
}

// NewLayerNorm registers name+".w" (ones) and name+".b" (zeros), neither decayed; both are read
// as f32 master weights (Param.MasterRead).
func NewLayerNorm(ps *Params, name string, c int) *LayerNorm {
	l := &LayerNorm{
		W: ps.Add(name+".w", Init{Value: 1}, false, c),
		B: ps.Add(name+".b", Init{}, false, c),
		C: c,
	}
	l.W.MasterRead, l.B.MasterRead = true, true
	return l
}

// LayerNormForward: y = (x − mean)·rstd·w + b over rows.
// x and y are (R,C); w, b (C) f32; mean, rstd (R) f32 are written for backward.
func LayerNormForward(dev tensor.Device, y, mean, rstd, x, w, b *tensor.Tensor) {
	dev.LayerNorm(y, mean, rstd, x, w, b, LayerNormEps)
}

// LayerNormBackward accumulates dx (R,C), dw (C) and db (C) from dy (R,C) and the forward's
// x (R,C), w (C), mean (R), rstd (R). dx accumulates too: callers pass a zeroed dx or the
// gradient of a residual stream that x also feeds.
func LayerNormBackward(dev tensor.Device, dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	dev.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
}

// Forward: y (R,C), mean and rstd (R) f32 from x (R,C).
func (l *LayerNorm) Forward(y, mean, rstd, x *tensor.Tensor) {
	LayerNormForward(x.Device(), y, mean, rstd, x, l.W.Master(), l.B.Master())
}

// Backward accumulates dx (R,C) and the gain/bias gradients, then both parameters are ready.
func (l *LayerNorm) Backward(dx, dy, x, mean, rstd *tensor.Tensor) {
	LayerNormBackward(x.Device(), dx, l.W.G, l.B.G, dy, x, l.W.Master(), mean, rstd)
	l.B.Ready()
	l.W.Ready()
}

// backwardColSum is Backward that also adds the column sums of the dx it leaves into s through cs
// (tensor.LNBackwardColSummer): a residual projection's bias gradient. s nil: Backward.
func (l *LayerNorm) backwardColSum(dx, dy, x, mean, rstd, s *tensor.Tensor, cs tensor.LNBackwardColSummer) {
	if s == nil || cs == nil {
		l.Backward(dx, dy, x, mean, rstd)
		return
	}
	cs.LayerNormBackwardColSum(dx, l.W.G, l.B.G, dy, x, l.W.Master(), mean, rstd, s)
	l.B.Ready()
	l.W.Ready()
}
