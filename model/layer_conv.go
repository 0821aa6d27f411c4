package model

import (
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// Conv2d: y = x ⋆ W + b on NCHW tensors (or NHWC: Geom.Layout), W (Out,In,K,K) as in PyTorch, b (Out) optional, groups 1.
// Shapes: x (N,In,H,W) → y (N,Out,OH,OW), OH = (H + 2·Pad − K)/Stride + 1.
//
// The work is the device's tensor.ConvDevice (on the CPU: im2col into the SGEMM, model/cpu/conv.go);
// a device without that ability panics with a message naming it, and the models that use Conv2d
// check with tensor.AsConv when they are built. Gradients accumulate like Linear's.
type Conv2d struct {
	W       *Param // (Out,In,K,K)
	B       *Param // (Out), nil without bias
	In, Out int
	Geom    tensor.ConvGeom
}

// NewConv2d registers name+".w" (decayed, He init N(0, 2/(In·K·K))) and, with bias, name+".b".
func NewConv2d(ps *Params, name string, in, out, k, stride, pad int, bias bool) *Conv2d {
	c := &Conv2d{In: in, Out: out, Geom: tensor.ConvGeom{KH: k, KW: k, Stride: stride, Pad: pad}}
	std := float32(math.Sqrt(2 / float64(in*k*k)))
	c.W = ps.Add(name+".w", Init{Std: std}, true, out, in, k, k)
	if bias {
		c.B = ps.Add(name+".b", Init{}, false, out)
	}
	return c
}

// OutShape is y's shape for an input x (N,In,H,W), both in the layout of Geom.
func (c *Conv2d) OutShape(x *tensor.Tensor) []int {
	n, _, h, w := c.Geom.Layout.Dims(x.Shape())
	oh, ow := c.Geom.OutHW(h, w)
	return c.Geom.Layout.Shape(n, c.Out, oh, ow)
}

// conv is dev's ConvDevice; a device without one is a programming error here (models check
// with tensor.AsConv when built).
func conv(dev tensor.Device) tensor.ConvDevice {
	cd, err := tensor.AsConv(dev)
	if err != nil {
		panic("model: " + err.Error())
	}
	return cd
}

// Conv2dForward: y (N,Out,OH,OW) = x (N,In,H,W) ⋆ w (Out,In,KH,KW) + b (Out, or nil).
func Conv2dForward(dev tensor.Device, y, x, w, b *tensor.Tensor, g tensor.ConvGeom) {
	conv(dev).Conv2d(y, x, w, b, g)
}

// Conv2dBackward: dx (N,In,H,W) overwritten (nil skips it), dw (Out,In,KH,KW) and db (Out, nil
// skips it) accumulate, from dy (N,Out,OH,OW) and the forward's x and w.
func Conv2dBackward(dev tensor.Device, dx, dw, db, dy, x, w *tensor.Tensor, g tensor.ConvGeom) {
	conv(dev).Conv2dBackward(dx, dw, db, dy, x, w, g)
}

// Forward: y = conv(x) (+ b).
func (c *Conv2d) Forward(y, x *tensor.Tensor) {
	var b *tensor.Tensor
	if c.B != nil {
		b = c.B.Compute()
	}
	Conv2dForward(x.Device(), y, x, c.W.Compute(), b, c.Geom)
}

// Backward writes dx (nil skips it) and accumulates dW (and db); then the parameters are ready.
func (c *Conv2d) Backward(dx, dy, x *tensor.Tensor) {
	var db *tensor.Tensor
	if c.B != nil {
		db = c.B.G
	}
	Conv2dBackward(x.Device(), dx, c.W.G, db, dy, x, c.W.Compute(), c.Geom)
	if c.B != nil {
		c.B.Ready()
	}
	c.W.Ready()
}
