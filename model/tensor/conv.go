package tensor

import "fmt"

// ConvDevice is the optional ability of a device to run convolutional networks (issue 21): 2-D
// convolution, batch normalisation over (N,H,W) per channel, max pooling and global average
// pooling, each with its backward. It is not part of Device, so a device without it (the CUDA
// device, for now) still builds; layers find it with AsConv, which says clearly what is missing.
//
// Layout: an image tensor is NCHW or NHWC (Layout; a convolution's and a pool's in its ConvGeom,
// the batch norms' and the global pool's as their first argument), row-major: NCHW x (N,C,H,W),
// element (n,c,h,w) at ((n·C+c)·H+h)·W+w; NHWC x (N,H,W,C), element (n,c,h,w) at
// ((n·H+h)·W+w)·C+c (channels last: what tensor-core convolutions read). Shapes below are
// written NCHW; under NHWC every image tensor's shape is the same dimensions in NHWC order
// (Layout.Shape). A convolution's weight is (OC, C, KH, KW) as in PyTorch (groups 1) in both
// layouts: the parameters, checkpoints and exports do not depend on the layout.
// Floating inputs may be f32 or f16 as for Device; statistics (mean, rstd, running mean and
// variance) and parameter gradients are f32. The operations follow Device's contract (they may
// run asynchronously; "accumulates" adds into the output).
type ConvDevice interface {
	// Conv2d: y (N,OC,OH,OW) = x (N,C,H,W) ⋆ w (OC,C,KH,KW) + b (OC) (b may be nil), with
	// OH = (H + 2·Pad − KH)/Stride + 1 and the same for OW. y is overwritten.
	Conv2d(y, x, w, b *Tensor, g ConvGeom)
	// Conv2dBackward: dx (N,C,H,W) is overwritten with the input gradient (nil skips it);
	// dw (OC,C,KH,KW) and db (OC) accumulate (db nil skips it); dy is (N,OC,OH,OW), x and w are
	// the forward's.
	Conv2dBackward(dx, dw, db, dy, x, w *Tensor, g ConvGeom)

	// BatchNorm in training mode over x (N,C,H,W) per channel c: mean (C) and rstd (C) f32 get
	// the batch's mean and 1/√(var+eps) (var biased, over N·H·W), and y = (x−mean)·rstd·w + b
	// with w, b (C) f32. When runMean and runVar (C) f32 are not nil they are updated with
	// momentum: run = (1−momentum)·run + momentum·stat, the variance unbiased (N·H·W−1), as
	// PyTorch does.
	BatchNorm(l Layout, y, mean, rstd, runMean, runVar, x, w, b *Tensor, eps, momentum float32)
	// BatchNormInference: y = (x − runMean)/√(runVar+eps)·w + b (evaluation mode).
	BatchNormInference(l Layout, y, x, w, b, runMean, runVar *Tensor, eps float32)
	// BatchNormBackward: dx (N,C,H,W) overwritten; dw, db (C) accumulate; from dy and the
	// training forward's x, w, mean and rstd.
	BatchNormBackward(l Layout, dx, dw, db, dy, x, w, mean, rstd *Tensor)

	// MaxPool2d: y (N,C,OH,OW) = max over each window of x (N,C,H,W) (padding never wins);
	// arg (N,C,OH,OW) i32 gets the index within its (H,W) plane of the maximum, for the backward.
	MaxPool2d(y, arg, x *Tensor, g ConvGeom)
	// MaxPool2dBackward: dx (N,C,H,W) overwritten: dy routed to the forward's maxima; g is the
	// forward's (a device may gather each input's gradient from the windows that cover it, in
	// window order, so overlapping windows add in a fixed order without atomics).
	MaxPool2dBackward(dx, dy, arg *Tensor, g ConvGeom)

	// GlobalAvgPool: y (N,C) = mean of x (N,C,H,W) over H·W.
	GlobalAvgPool(l Layout, y, x *Tensor)
	// GlobalAvgPoolBackward: dx (N,C,H,W) = dy (N,C)/(H·W), overwritten.
	GlobalAvgPoolBackward(l Layout, dx, dy *Tensor)
}

// SyncBatchNormDevice is the optional ability of a device to split training-mode batch
// normalisation where statistics cross processes (SyncBatchNorm), PyTorch's batch_norm_stats,
// batch_norm_backward_reduce and batch_norm_backward_elemt: the layer reduces the per-channel
// numbers between them, and normalises with BatchNormInference given the global mean and biased
// variance. Layers find it with AsSyncBatchNorm.
type SyncBatchNormDevice interface {
	// BatchNormStats: mean (C) and variance (C) f32 get x's (N,C,H,W) per-channel mean and biased
	// variance over N·H·W (accumulated in f64), as BatchNorm computes them.
	BatchNormStats(l Layout, mean, variance, x *Tensor)
	// BatchNormBackwardReduce: sdy (C) and sdyx (C) f32 are overwritten with Σdy and Σdy·x̂ over
	// N·H·W, x̂ = (x − mean)·rstd; dw and db (C) accumulate sdyx and sdy (nil skips them).
	BatchNormBackwardReduce(l Layout, sdy, sdyx, dw, db, dy, x, mean, rstd *Tensor)
	// BatchNormBackwardElemt: dx = w·rstd·(dy − sdy/count − x̂·sdyx/count), overwritten, with
	// sdy, sdyx and count the reduction's over every process.
	BatchNormBackwardElemt(l Layout, dx, dy, x, w, mean, rstd, sdy, sdyx *Tensor, count int)
}

// BatchNormReLUDevice is the optional ability of a device to fold the ReLU after a training-mode
// batch norm (a ResNet's conv → BN → ReLU) into the batch norm's own passes. The results are
// those of the unfused pair, bit for bit; a device may keep the fusion behind a switch, which
// FusesBatchNormReLU reports.
type BatchNormReLUDevice interface {
	// BatchNormReLU: BatchNorm, then y = max(y, 0).
	BatchNormReLU(l Layout, y, mean, rstd, runMean, runVar, x, w, b *Tensor, eps, momentum float32)
	// BatchNormReLUBackward: BatchNormBackward of dy taken as 0 where y ≤ 0, y being
	// BatchNormReLU's output (ReLUBackward then BatchNormBackward); dy may be overwritten.
	BatchNormReLUBackward(l Layout, dx, dw, db, dy, y, x, w, mean, rstd *Tensor)
	// FusesBatchNormReLU reports whether callers should take the two methods above.
	FusesBatchNormReLU() bool
}

// ConvFilterCache is the optional ability of a device to keep what it derives from a
// convolution's filter (the CUDA device's channels-last copy for NHWC) from a training forward to
// the end of its backward, instead of deriving it for each call. CacheConvFilters(true) starts a
// cache (dropping any before it), false drops it; between the two the caller must not change the
// filters' values (a training step's forward and backward read the same weights).
type ConvFilterCache interface {
	CacheConvFilters(on bool)
}

// AddReLUDevice is the optional ability of a device to add two tensors and ReLU the sum in one
// pass (a residual block's end: out = relu(main + shortcut)): the bits of Add then ReLU.
type AddReLUDevice interface {
	AddReLU(out, a, b *Tensor)
	// AddReLUBackward: dx = dx + a where y > 0, else 0 (y a ReLU's output: the residual block's
	// input gradient finished and taken through the ReLU before it): the bits of Axpy(dx, 1, a)
	// then ReLUBackward(dx, dx, y).
	AddReLUBackward(dx, a, y *Tensor)
}

// AsSyncBatchNorm returns dev's SyncBatchNormDevice, or an error naming the device.
func AsSyncBatchNorm(dev Device) (SyncBatchNormDevice, error) {
	if c, ok := dev.(SyncBatchNormDevice); ok {
		return c, nil
	}
	return nil, fmt.Errorf("tensor: the %s device has no SyncBatchNorm yet (it does not implement tensor.SyncBatchNormDevice)", dev.Name())
}

// ConvGeom is a convolution's or pooling window's geometry: a KH×KW window moved by Stride
// over the input padded by Pad on every side (zeros for a convolution, −∞ for max pooling).
type ConvGeom struct {
	KH, KW      int
	Stride, Pad int
	Layout      Layout // of the input and output images (NCHW, the zero value, or NHWC)
}

// Layout is the order of an image tensor's axes in memory.
type Layout uint8

const (
	NCHW Layout = iota // (N,C,H,W): PyTorch's default, the CPU's fast path
	NHWC               // (N,H,W,C): channels last, what tensor-core convolutions read
)

func (l Layout) String() string {
	switch l {
	case NCHW:
		return "nchw"
	case NHWC:
		return "nhwc"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// ParseLayout reads "nchw" or "nhwc".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "nchw":
		return NCHW, nil
	case "nhwc":
		return NHWC, nil
	}
	return 0, fmt.Errorf("tensor: layout %q: want nchw or nhwc", s)
}

// Shape is the 4-D shape of an image batch of n images of c channels, h×w, in layout l.
func (l Layout) Shape(n, c, h, w int) []int {
	if l == NHWC {
		return []int{n, h, w, c}
	}
	return []int{n, c, h, w}
}

// Dims reads (N, C, H, W) from a 4-D image tensor's shape in layout l.
func (l Layout) Dims(shape []int) (n, c, h, w int) {
	if len(shape) != 4 {
		panic(fmt.Sprintf("tensor: %s image shape %v is not 4-D", l, shape))
	}
	if l == NHWC {
		return shape[0], shape[3], shape[1], shape[2]
	}
	return shape[0], shape[1], shape[2], shape[3]
}

// Out is the output size of an input size in (H or W) along a window side k.
func (g ConvGeom) Out(in, k int) int { return (in+2*g.Pad-k)/g.Stride + 1 }

// OutHW is the output (OH, OW) for an input of (H, W).
func (g ConvGeom) OutHW(h, w int) (int, int) { return g.Out(h, g.KH), g.Out(w, g.KW) }

// Valid reports a geometry's error, or nil.
func (g ConvGeom) Valid() error {
	if g.KH < 1 || g.KW < 1 || g.Stride < 1 || g.Pad < 0 {
		return fmt.Errorf("tensor: conv geometry %+v: want kernel ≥ 1, stride ≥ 1, pad ≥ 0", g)
	}
	return nil
}

// AsConv returns dev's ConvDevice, or an error naming the device when it has none.
func AsConv(dev Device) (ConvDevice, error) {
	if c, ok := dev.(ConvDevice); ok {
		return c, nil
	}
	return nil, fmt.Errorf("tensor: the %s device has no convolution yet (it does not implement tensor.ConvDevice)", dev.Name())
}
