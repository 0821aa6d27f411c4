package model

import "github.com/goddp/goddp/model/tensor"

// Linear: y = x·Wᵀ + b, with W (Out,In) as in PyTorch and b (Out) optional.
//
// Forward reads W and b through Param.Compute (the f16 copy under mixed precision); the
// gradients dW and db are always f32 and accumulate (MatMul beta = 1, BiasGrad), so gradient
// accumulation over micro-steps needs no extra pass.
type Linear struct {
	W *Param // (Out,In)
	B *Param // (Out), nil without bias
	// BiasSummed: B's gradient is summed where dy is written (a LayerNorm backward:
	// tensor.LNBackwardColSummer, a GPT's residual projections), so Backward takes dx and the
	// weight gradient alone, as plain GEMMs.
	BiasSummed bool
	In         int
	Out        int
	// Epilogue, when not nil (and the layer has a bias), adds the bias in the forward GEMM's
	// epilogue and sums its gradient in the weight-gradient GEMM's (tensor.EpilogueDevice;
	// GPTConfig.GemmEpilogue sets it on the attention's linears).
	Epilogue tensor.EpilogueDevice
	// GradEpilogue, when not nil (and the layer has a bias), sums the bias gradient in the
	// weight-gradient GEMM's epilogue but leaves the forward as without (a GPT's projections,
	// whose forward bias is folded into the residual adds: tensor.BiasEpiloguer).
	GradEpilogue tensor.EpilogueDevice
}

// NewLinear registers name+".w" (decayed, N(0,std²)) and, with bias, name+".b" (zero).
func NewLinear(ps *Params, name string, in, out int, std float32, bias bool) *Linear {
	l := &Linear{In: in, Out: out}
	l.W = ps.Add(name+".w", Init{Std: std}, true, out, in)
	if bias {
		l.B = ps.Add(name+".b", Init{}, false, out)
	}
	return l
}

// LinearForward: y = x·wᵀ + b.
// x is (R,In) (any leading dims), w is (Out,In), b is (Out) or nil, y is (R,Out).
func LinearForward(dev tensor.Device, y, x, w, b *tensor.Tensor) {
	dev.MatMul(y, x, w, false, true, 1, 0)
	if b != nil {
		dev.AddBias(y, b)
	}
}

// LinearBackward: dx = dy·w (overwritten; nil skips it), dw += dyᵀ·x, db += colsum(dy) (nil skips).
// dx is (R,In), dw (Out,In) f32, db (Out) f32, dy (R,Out); x and w as in the forward.
func LinearBackward(dev tensor.Device, dx, dw, db, dy, x, w *tensor.Tensor) {
	if dx != nil {
		dev.MatMul(dx, dy, w, false, false, 1, 0)
	}
	dev.MatMul(dw, dy, x, true, false, 1, 1)
	if db != nil {
		dev.BiasGrad(db, dy)
	}
}

// Forward: y (R,Out) = x (R,In)·Wᵀ + b.
func (l *Linear) Forward(y, x *tensor.Tensor) {
	if l.Epilogue != nil && l.B != nil {
		l.Epilogue.LinearBias(y, x, l.W.Compute(), l.B.Compute())
		return
	}
	LinearForward(x.Device(), y, x, l.W.Compute(), l.bias())
}

// product is Forward without the bias add: y = x·Wᵀ, for a caller that folds the bias into the
// pass reading y (tensor.BiasFolder). Not with an Epilogue (which adds the bias in the GEMM).
func (l *Linear) product(y, x *tensor.Tensor) {
	x.Device().MatMul(y, x, l.W.Compute(), false, true, 1, 0)
}

// Backward writes dx (R,In) (nil skips it) and accumulates the parameter gradients from dy (R,Out)
// and the forward's input x (R,In); then both parameters are ready.
func (l *Linear) Backward(dx, dy, x *tensor.Tensor) {
	if l.BiasSummed {
		l.backwardNoBias(dx, dy, x)
		return
	}
	var db *tensor.Tensor
	if l.B != nil {
		db = l.B.G
	}
	if ed := l.gradEpilogue(); ed != nil && l.B != nil {
		if dx != nil {
			x.Device().MatMul(dx, dy, l.W.Compute(), false, false, 1, 0)
		}
		ed.LinearGradWB(l.W.G, db, dy, x)
	} else {
		LinearBackward(x.Device(), dx, l.W.G, db, dy, x, l.W.Compute())
	}
	if l.B != nil {
		l.B.Ready()
	}
	l.W.Ready()
}

// backwardNoBias is Backward for a caller that has already accumulated the bias gradient from dy
// (tensor.GELUBiasGrader): dx and the weight gradient; then both parameters are ready, in
// Backward's order. Not with an Epilogue.
func (l *Linear) backwardNoBias(dx, dy, x *tensor.Tensor) {
	LinearBackward(x.Device(), dx, l.W.G, nil, dy, x, l.W.Compute())
	if l.B != nil {
		l.B.Ready()
	}
	l.W.Ready()
}

// gradEpilogue is the epilogue that sums the bias gradient: Epilogue, else GradEpilogue.
func (l *Linear) gradEpilogue() tensor.EpilogueDevice {
	if l.Epilogue != nil {
		return l.Epilogue
	}
	return l.GradEpilogue
}

func (l *Linear) bias() *tensor.Tensor {
	if l.B == nil {
		return nil
	}
	return l.B.Compute()
}
