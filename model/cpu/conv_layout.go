package cpu

import (
	"fmt"
	"unsafe"

	"github.com/goddp/goddp/model/tensor"
)

// The layouts of tensor.ConvDevice on the CPU. NCHW is the CPU's own path (conv.go: im2col into
// the SGEMM, planes contiguous per channel). NHWC (channels last, what the CUDA device's
// tensor-core convolutions read) is that same path between transposes: each image input is
// copied into an NCHW scratch tensor, the NCHW operation runs, and each image output is copied
// back. The numbers are therefore exactly the NCHW path's (a transpose moves bits, it rounds
// nothing), which is what the CPU is for here: the reference the CUDA device's NHWC operations
// are tested against, in their own layout. It is not a fast path; the scratch (one copy of each
// image operand) is allocated from the device and shows in its memory statistics.

// Conv2d: see tensor.ConvDevice.
func (c *Device) Conv2d(y, x, w, b *tensor.Tensor, g tensor.ConvGeom) {
	if g.Layout == tensor.NCHW {
		c.nchwConv2d(y, x, w, b, g)
		return
	}
	g.Layout = tensor.NCHW
	xt, yt := c.toNCHW(x, "nhwc.x"), c.likeNCHW(y, "nhwc.y")
	c.nchwConv2d(yt, xt, w, b, g)
	c.fromNCHW(y, yt)
	c.Free(xt)
	c.Free(yt)
}

// Conv2dBackward: see tensor.ConvDevice.
func (c *Device) Conv2dBackward(dx, dw, db, dy, x, w *tensor.Tensor, g tensor.ConvGeom) {
	if g.Layout == tensor.NCHW {
		c.nchwConv2dBackward(dx, dw, db, dy, x, w, g)
		return
	}
	g.Layout = tensor.NCHW
	dyt, xt, dxt := c.toNCHW(dy, "nhwc.dy"), c.toNCHW(x, "nhwc.x"), c.likeNCHW(dx, "nhwc.dx")
	c.nchwConv2dBackward(dxt, dw, db, dyt, xt, w, g)
	c.fromNCHW(dx, dxt)
	c.free(dyt, xt, dxt)
}

// BatchNorm: see tensor.ConvDevice.
func (c *Device) BatchNorm(l tensor.Layout, y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32) {
	if l == tensor.NCHW {
		c.nchwBatchNorm(y, mean, rstd, runMean, runVar, x, w, b, eps, momentum)
		return
	}
	xt, yt := c.toNCHW(x, "nhwc.x"), c.likeNCHW(y, "nhwc.y")
	c.nchwBatchNorm(yt, mean, rstd, runMean, runVar, xt, w, b, eps, momentum)
	c.fromNCHW(y, yt)
	c.free(xt, yt)
}

// BatchNormInference: see tensor.ConvDevice.
func (c *Device) BatchNormInference(l tensor.Layout, y, x, w, b, runMean, runVar *tensor.Tensor, eps float32) {
	if l == tensor.NCHW {
		c.nchwBatchNormInference(y, x, w, b, runMean, runVar, eps)
		return
	}
	xt, yt := c.toNCHW(x, "nhwc.x"), c.likeNCHW(y, "nhwc.y")
	c.nchwBatchNormInference(yt, xt, w, b, runMean, runVar, eps)
	c.fromNCHW(y, yt)
	c.free(xt, yt)
}

// BatchNormBackward: see tensor.ConvDevice.
func (c *Device) BatchNormBackward(l tensor.Layout, dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	if l == tensor.NCHW {
		c.nchwBatchNormBackward(dx, dw, db, dy, x, w, mean, rstd)
		return
	}
	dyt, xt, dxt := c.toNCHW(dy, "nhwc.dy"), c.toNCHW(x, "nhwc.x"), c.likeNCHW(dx, "nhwc.dx")
	c.nchwBatchNormBackward(dxt, dw, db, dyt, xt, w, mean, rstd)
	c.fromNCHW(dx, dxt)
	c.free(dyt, xt, dxt)
}

// BatchNormStats: see tensor.SyncBatchNormDevice.
func (c *Device) BatchNormStats(l tensor.Layout, mean, variance, x *tensor.Tensor) {
	if l == tensor.NCHW {
		c.nchwBatchNormStats(mean, variance, x)
		return
	}
	xt := c.toNCHW(x, "nhwc.x")
	c.nchwBatchNormStats(mean, variance, xt)
	c.free(xt)
}

// BatchNormBackwardReduce: see tensor.SyncBatchNormDevice.
func (c *Device) BatchNormBackwardReduce(l tensor.Layout, sdy, sdyx, dw, db, dy, x, mean, rstd *tensor.Tensor) {
	if l == tensor.NCHW {
		c.nchwBatchNormBackwardReduce(sdy, sdyx, dw, db, dy, x, mean, rstd)
		return
	}
	dyt, xt := c.toNCHW(dy, "nhwc.dy"), c.toNCHW(x, "nhwc.x")
	c.nchwBatchNormBackwardReduce(sdy, sdyx, dw, db, dyt, xt, mean, rstd)
	c.free(dyt, xt)
}

// BatchNormBackwardElemt: see tensor.SyncBatchNormDevice.
func (c *Device) BatchNormBackwardElemt(l tensor.Layout, dx, dy, x, w, mean, rstd, sdy, sdyx *tensor.Tensor, count int) {
	if l == tensor.NCHW {
		c.nchwBatchNormBackwardElemt(dx, dy, x, w, mean, rstd, sdy, sdyx, count)
		return
	}
	dyt, xt, dxt := c.toNCHW(dy, "nhwc.dy"), c.toNCHW(x, "nhwc.x"), c.likeNCHW(dx, "nhwc.dx")
	c.nchwBatchNormBackwardElemt(dxt, dyt, xt, w, mean, rstd, sdy, sdyx, count)
	c.fromNCHW(dx, dxt)
	c.free(dyt, xt, dxt)
}

// MaxPool2d: see tensor.ConvDevice. arg holds the index within its (H,W) plane in both layouts.
func (c *Device) MaxPool2d(y, arg, x *tensor.Tensor, g tensor.ConvGeom) {
	if g.Layout == tensor.NCHW {
		c.nchwMaxPool2d(y, arg, x, g)
		return
	}
	g.Layout = tensor.NCHW
	xt, yt, at := c.toNCHW(x, "nhwc.x"), c.likeNCHW(y, "nhwc.y"), c.likeNCHW(arg, "nhwc.arg")
	c.nchwMaxPool2d(yt, at, xt, g)
	c.fromNCHW(y, yt)
	c.fromNCHW(arg, at)
	c.free(xt, yt, at)
}

// MaxPool2dBackward: see tensor.ConvDevice.
func (c *Device) MaxPool2dBackward(dx, dy, arg *tensor.Tensor, g tensor.ConvGeom) {
	if g.Layout == tensor.NCHW {
		c.nchwMaxPool2dBackward(dx, dy, arg)
		return
	}
	dyt, at, dxt := c.toNCHW(dy, "nhwc.dy"), c.toNCHW(arg, "nhwc.arg"), c.likeNCHW(dx, "nhwc.dx")
	c.nchwMaxPool2dBackward(dxt, dyt, at)
	c.fromNCHW(dx, dxt)
	c.free(dyt, at, dxt)
}

// GlobalAvgPool: see tensor.ConvDevice. y (N,C) is the same in both layouts.
func (c *Device) GlobalAvgPool(l tensor.Layout, y, x *tensor.Tensor) {
	if l == tensor.NCHW {
		c.nchwGlobalAvgPool(y, x)
		return
	}
	xt := c.toNCHW(x, "nhwc.x")
	c.nchwGlobalAvgPool(y, xt)
	c.free(xt)
}

// GlobalAvgPoolBackward: see tensor.ConvDevice.
func (c *Device) GlobalAvgPoolBackward(l tensor.Layout, dx, dy *tensor.Tensor) {
	if l == tensor.NCHW {
		c.nchwGlobalAvgPoolBackward(dx, dy)
		return
	}
	dxt := c.likeNCHW(dx, "nhwc.dx")
	c.nchwGlobalAvgPoolBackward(dxt, dy)
	c.fromNCHW(dx, dxt)
	c.free(dxt)
}

// toNCHW returns a new NCHW tensor holding t's NHWC image batch (nil for nil).
func (c *Device) toNCHW(t *tensor.Tensor, tag string) *tensor.Tensor {
	out := c.likeNCHW(t, tag)
	if out != nil {
		n, ch, h, w := tensor.NHWC.Dims(t.Shape())
		transposeImages(out, t, n, h*w, ch)
	}
	return out
}

// likeNCHW allocates an NCHW tensor for t's NHWC image batch, contents undefined (nil for nil).
func (c *Device) likeNCHW(t *tensor.Tensor, tag string) *tensor.Tensor {
	if t == nil {
		return nil
	}
	n, ch, h, w := tensor.NHWC.Dims(t.Shape())
	return c.Alloc(t.DType(), tag, tensor.NCHW.Shape(n, ch, h, w)...)
}

// fromNCHW copies src's NCHW image batch into dst, the same batch in NHWC (nothing for nil).
func (c *Device) fromNCHW(dst, src *tensor.Tensor) {
	if dst == nil {
		return
	}
	n, ch, h, w := tensor.NCHW.Dims(src.Shape())
	transposeImages(dst, src, n, ch, h*w)
}

func (c *Device) free(ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			c.Free(t)
		}
	}
}

// transposeImages copies src, n matrices (a, b), into dst as n matrices (b, a), element bits
// unchanged: NHWC → NCHW is a = H·W, b = C; NCHW → NHWC is a = C, b = H·W.
func transposeImages(dst, src *tensor.Tensor, n, a, b int) {
	if dst.DType() != src.DType() || dst.Len() != src.Len() || src.Len() != n*a*b {
		panic(fmt.Sprintf("cpu: layout transpose: dst %s, src %s for %d×(%d,%d)", dst, src, n, a, b))
	}
	switch src.DType().Size() {
	case 4:
		transposeN(elems[uint32](dst), elems[uint32](src), n, a, b)
	case 2:
		transposeN(elems[uint16](dst), elems[uint16](src), n, a, b)
	default:
		panic(fmt.Sprintf("cpu: layout transpose of %s", src))
	}
}

// elems is t's elements as raw E-sized words (E the dtype's size).
func elems[E uint16 | uint32](t *tensor.Tensor) []E {
	w := words(t)
	per := 4 / int(unsafe.Sizeof(E(0)))
	all := unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*per)
	return all[t.Offset() : t.Offset()+t.Len()]
}

func transposeN[E uint16 | uint32](dst, src []E, n, a, b int) {
	for m := 0; m < n; m++ {
		s, d := src[m*a*b:(m+1)*a*b], dst[m*a*b:(m+1)*a*b]
		for i := 0; i < a; i++ {
			row := s[i*b : (i+1)*b]
			for j, v := range row {
				d[j*a+i] = v
			}
		}
	}
}
