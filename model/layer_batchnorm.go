package model

import "github.com/goddp/goddp/model/tensor"

// BatchNorm2d normalises x (N,C,H,W) (or NHWC, Layout) per channel over (N,H,W), PyTorch's BatchNorm2d: in training
// y = (x − μ_B)·rstd_B·W + B with the batch's statistics (variance biased), which also move the
// running statistics, run = (1 − Momentum)·run + Momentum·stat (variance unbiased); in
// evaluation y = (x − RunMean)/√(RunVar + Eps)·W + B.
//
// W and B (C) are parameters (f32 even under mixed precision, like LayerNorm's); RunMean and
// RunVar (C) f32 are buffers: state that no gradient trains, which the model keeps in its buffer
// slab (Buffers) so DDP can broadcast it (worker: broadcast from rank 0 at the start and after
// every optimizer step, as PyTorch DDP's broadcast_buffers).
type BatchNorm2d struct {
	W, B            *Param         // (C) gain (ones) and shift (zeros), not decayed
	RunMean, RunVar *tensor.Tensor // (C) f32 views into the model's buffer slab
	C               int
	Eps, Momentum   float32
	Layout          tensor.Layout // of x and y: NCHW (the zero value) or NHWC

	// Sync, when set, makes this a SyncBatchNorm: the training statistics are those of the
	// whole batch over every process (layer_syncbatchnorm.go). nil: this process's batch.
	Sync    StatReducer
	gather  []float32 // host scratch of the reductions
	count   int       // the last synchronised forward's global count, for its backward
	syncErr error     // the first failed reduction since SyncErr
}

// BatchNorm defaults, PyTorch's.
const (
	BatchNormEps      = 1e-5
	BatchNormMomentum = 0.1
)

// NewBatchNorm2d registers name+".w" (ones) and name+".b" (zeros), and the buffers
// name+".running_mean" and name+".running_var" in bufs. The gain and bias are read as f32
// master weights (Param.MasterRead).
func NewBatchNorm2d(ps *Params, bufs *Buffers, name string, c int) *BatchNorm2d {
	bn := &BatchNorm2d{C: c, Eps: BatchNormEps, Momentum: BatchNormMomentum}
	bn.W = ps.Add(name+".w", Init{Value: 1}, false, c)
	bn.B = ps.Add(name+".b", Init{}, false, c)
	bn.W.MasterRead, bn.B.MasterRead = true, true
	bufs.Add(name+".running_mean", 0, c, &bn.RunMean)
	bufs.Add(name+".running_var", 1, c, &bn.RunVar)
	return bn
}

// BatchNormForward (training): y, mean (C) and rstd (C) f32 from x (N,C,H,W), w, b (C) f32;
// runMean and runVar (C) are updated with momentum unless nil (a checkpoint's recompute passes
// nil: the statistics moved once, in the first forward).
func BatchNormForward(dev tensor.Device, l tensor.Layout, y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32) {
	conv(dev).BatchNorm(l, y, mean, rstd, runMean, runVar, x, w, b, eps, momentum)
}

// BatchNormBackward: dx (N,C,H,W) overwritten, dw and db (C) accumulate, from dy and the
// training forward's x, w, mean and rstd.
func BatchNormBackward(dev tensor.Device, l tensor.Layout, dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	conv(dev).BatchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd)
}

// Forward in training mode (see BatchNormForward); update moves the running statistics.
func (l *BatchNorm2d) Forward(y, mean, rstd, x *tensor.Tensor, update bool) {
	if l.Sync != nil {
		l.syncForward(y, mean, rstd, x, update)
		return
	}
	rm, rv := l.RunMean, l.RunVar
	if !update {
		rm, rv = nil, nil
	}
	BatchNormForward(x.Device(), l.Layout, y, mean, rstd, rm, rv, x, l.W.Master(), l.B.Master(), l.Eps, l.Momentum)
}

// fusedReLU returns the device's BatchNormReLUDevice when this layer may fold the ReLU after it
// into its passes: the device offers and switches it on, and the statistics are this process's
// (a SyncBatchNorm's go through its own reductions).
func (l *BatchNorm2d) fusedReLU(dev tensor.Device) (tensor.BatchNormReLUDevice, bool) {
	f, ok := dev.(tensor.BatchNormReLUDevice)
	if !ok || l.Sync != nil || !f.FusesBatchNormReLU() {
		return nil, false
	}
	return f, true
}

// ForwardReLU is Forward then y = max(y, 0) in one go where the device fuses the two
// (tensor.BatchNormReLUDevice); it reports whether it did. Where it did not, it did nothing: the
// caller runs Forward and its ReLU.
func (l *BatchNorm2d) ForwardReLU(y, mean, rstd, x *tensor.Tensor, update bool) bool {
	f, ok := l.fusedReLU(x.Device())
	if !ok {
		return false
	}
	rm, rv := l.RunMean, l.RunVar
	if !update {
		rm, rv = nil, nil
	}
	f.BatchNormReLU(l.Layout, y, mean, rstd, rm, rv, x, l.W.Master(), l.B.Master(), l.Eps, l.Momentum)
	return true
}

// BackwardReLU is the backward of a ForwardReLU that fused (y its output): ReLU's backward and
// Backward in one go; dy may be overwritten.
func (l *BatchNorm2d) BackwardReLU(dx, dy, y, x, mean, rstd *tensor.Tensor) {
	f, ok := l.fusedReLU(x.Device())
	if !ok {
		panic("model: BatchNorm2d.BackwardReLU without the device's fusion")
	}
	f.BatchNormReLUBackward(l.Layout, dx, l.W.G, l.B.G, dy, y, x, l.W.Master(), mean, rstd)
	l.B.Ready()
	l.W.Ready()
}

// Eval is the evaluation-mode forward, with the running statistics.
func (l *BatchNorm2d) Eval(y, x *tensor.Tensor) {
	conv(x.Device()).BatchNormInference(l.Layout, y, x, l.W.Master(), l.B.Master(), l.RunMean, l.RunVar, l.Eps)
}

// Backward writes dx and accumulates the gain and shift gradients; then both are ready.
func (l *BatchNorm2d) Backward(dx, dy, x, mean, rstd *tensor.Tensor) {
	if l.Sync != nil {
		l.syncBackward(dx, dy, x, mean, rstd)
	} else {
		BatchNormBackward(x.Device(), l.Layout, dx, l.W.G, l.B.G, dy, x, l.W.Master(), mean, rstd)
	}
	l.B.Ready()
	l.W.Ready()
}
