package model

import "github.com/goddp/goddp/model/tensor"

// Residual: out = x + f(x). The gradient passes through unchanged to both summands, so backward
// is an accumulation into the gradient of the skip path.

// ResidualForward: out = x + fx; all (R,C), out may alias either input.
func ResidualForward(dev tensor.Device, out, x, fx *tensor.Tensor) { dev.Add(out, x, fx) }

// ResidualBackward: dx += dout (the skip path); the branch receives dout as its own gradient.
func ResidualBackward(dev tensor.Device, dx, dout *tensor.Tensor) { dev.Axpy(dx, 1, dout) }
