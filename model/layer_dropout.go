package model

import "github.com/goddp/goddp/model/tensor"

// Dropout zeroes each element with probability P and scales the rest by 1/(1-P). The mask is a
// pure function of (seed, element index), so backward regenerates it and nothing is saved; an
// activation-checkpointed block recomputes exactly the same mask from the same seed.

// DropoutForward: y = x·mask/(1-p); x and y same length. p == 0 copies.
func DropoutForward(dev tensor.Device, y, x *tensor.Tensor, p float32, seed uint64) {
	if p == 0 {
		dev.Copy(y, x)
		return
	}
	dev.Dropout(y, x, p, seed)
}

// DropoutBackward: dx = dy·mask/(1-p) with the forward's p and seed.
func DropoutBackward(dev tensor.Device, dx, dy *tensor.Tensor, p float32, seed uint64) {
	if p == 0 {
		dev.Copy(dx, dy)
		return
	}
	dev.DropoutBackward(dx, dy, p, seed)
}
