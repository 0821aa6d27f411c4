package model

// Residual: out = x + f(x). The gradient passes through unchanged to both summands, so backward
// is an accumulation into the gradient of the skip path.

// ResidualForward: out = x + fx; all (R,C), out may alias either input.
func ResidualForward(dev Device, out, x, fx *Tensor) { dev.Add(out, x, fx) }

// ResidualBackward: dx += dout (the skip path); the branch receives dout as its own gradient.
func ResidualBackward(dev Device, dx, dout *Tensor) { dev.Axpy(dx, 1, dout) }
