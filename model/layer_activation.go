package model

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Activation is an elementwise nonlinearity: ReLU or GELU (tanh form).
//
// What backward needs differs: ReLU's backward reads the output y (y > 0), GELU's the input x.
// NeedsInput says which one a layer must keep.
type Activation int

const (
	ReLU Activation = iota
	GELU
)

// ParseActivation reads "relu" or "gelu".
func ParseActivation(s string) (Activation, error) {
	switch s {
	case "relu", "":
		return ReLU, nil
	case "gelu":
		return GELU, nil
	}
	return 0, fmt.Errorf("model: unknown activation %q (want relu or gelu)", s)
}

func (a Activation) String() string {
	if a == GELU {
		return "gelu"
	}
	return "relu"
}

// NeedsInput reports whether backward reads the forward input (GELU) rather than the output (ReLU).
func (a Activation) NeedsInput() bool { return a == GELU }

// ActivationForward: y = act(x); x and y any shape, same length.
func ActivationForward(dev tensor.Device, a Activation, y, x *tensor.Tensor) {
	if a == GELU {
		dev.GELU(y, x)
	} else {
		dev.ReLU(y, x)
	}
}

// ActivationBackward: dx = act'(·)⊙dy. saved is x for GELU, y for ReLU (see NeedsInput).
// dx may alias dy.
func ActivationBackward(dev tensor.Device, a Activation, dx, dy, saved *tensor.Tensor) {
	if a == GELU {
		dev.GELUBackward(dx, dy, saved)
	} else {
		dev.ReLUBackward(dx, dy, saved)
	}
}

// ReLUForward: y = max(x, 0).
func ReLUForward(dev tensor.Device, y, x *tensor.Tensor) { dev.ReLU(y, x) }

// ReLUBackward: dx = dy·[y > 0]; y is the forward output; dx may alias dy.
func ReLUBackward(dev tensor.Device, dx, dy, y *tensor.Tensor) { dev.ReLUBackward(dx, dy, y) }

// GELUForward: y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func GELUForward(dev tensor.Device, y, x *tensor.Tensor) { dev.GELU(y, x) }

// GELUBackward: dx = gelu'(x)·dy; x is the forward input; dx may alias dy.
func GELUBackward(dev tensor.Device, dx, dy, x *tensor.Tensor) { dev.GELUBackward(dx, dy, x) }
