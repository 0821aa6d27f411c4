package model

import "github.com/goddp/goddp/model/tensor"

// Pooling on NCHW (or NHWC: the layout is the geometry's or an argument) tensors: MaxPool2d (a window's maximum; the backward routes the gradient to it,
// so the forward saves the argmax, (N,C,OH,OW) i32) and global average pooling (N,C,H,W) → (N,C).

// MaxPool2dForward: y (N,C,OH,OW) and arg (N,C,OH,OW) i32 from x (N,C,H,W).
func MaxPool2dForward(dev tensor.Device, y, arg, x *tensor.Tensor, g tensor.ConvGeom) {
	conv(dev).MaxPool2d(y, arg, x, g)
}

// MaxPool2dBackward: dx (N,C,H,W) overwritten from dy (N,C,OH,OW) and the forward's arg and geometry.
func MaxPool2dBackward(dev tensor.Device, dx, dy, arg *tensor.Tensor, g tensor.ConvGeom) {
	conv(dev).MaxPool2dBackward(dx, dy, arg, g)
}

// GlobalAvgPoolForward: y (N,C) = mean over H·W of x (N,C,H,W).
func GlobalAvgPoolForward(dev tensor.Device, l tensor.Layout, y, x *tensor.Tensor) {
	conv(dev).GlobalAvgPool(l, y, x)
}

// GlobalAvgPoolBackward: dx (N,C,H,W) = dy (N,C)/(H·W), overwritten.
func GlobalAvgPoolBackward(dev tensor.Device, l tensor.Layout, dx, dy *tensor.Tensor) {
	conv(dev).GlobalAvgPoolBackward(l, dx, dy)
}
