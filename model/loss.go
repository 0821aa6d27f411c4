package model

import "github.com/goddp/goddp/model/tensor"

// Softmax cross-entropy, fused and stable: the device computes log-softmax in f32 (f16 logits are
// widened), so mixed precision never takes the softmax or the loss out of f32.
//
// The loss is the mean over rows whose target is not negative (negative targets are ignored, as
// with PyTorch's ignore_index). Its gradient is seeded straight into the logits' place:
// dlogits = (softmax − onehot)·dloss/count.

// CrossEntropyForward: loss (1) f32 = Σ_rows −log softmax(logits)[target] / count.
// logits (R,V) f32 or f16, targets (R) i32 (negative = ignore), losses (R) f32 scratch,
// count = number of targets ≥ 0 (0 gives a loss of 0).
func CrossEntropyForward(dev tensor.Device, loss, losses, logits, targets *tensor.Tensor, count int) {
	dev.CrossEntropy(losses, logits, targets)
	dev.Fill(loss, 0)
	dev.Sum(loss, losses)
	if count > 0 {
		dev.Scale(loss, 1/float32(count))
	}
}

// CrossEntropyBackward: dlogits (R,V) = (softmax(logits) − onehot(targets))·dloss/count, zero on
// ignored rows. dlogits may be logits itself (the logits are then gone).
func CrossEntropyBackward(dev tensor.Device, dlogits, logits, targets *tensor.Tensor, dloss float32, count int) {
	dev.CrossEntropyBackward(dlogits, logits, targets, crossEntropyScale(dloss, count))
}

// crossEntropyScale is the gradient's factor dloss/count (0 when no target counts).
func crossEntropyScale(dloss float32, count int) float32 {
	if count > 0 {
		return dloss / float32(count)
	}
	return 0
}

// CountTargets returns how many targets (any shape, i32) are not negative. It reads the tensor back
// to the host, so it waits for the device; callers that know the count pass it in Inputs.Valid.
func CountTargets(targets *tensor.Tensor) int {
	ids := make([]int32, targets.Len())
	targets.Device().DownloadI32(ids, targets)
	n := 0
	for _, t := range ids {
		if t >= 0 {
			n++
		}
	}
	return n
}

// ---- the language-model head and its loss, chunk by chunk ----
//
// logits = x·wᵀ is (R,V): for GPT-2 small at batch 16 that is 16384 × 50304 values, 1.6 GB in f16
// and the largest activation of the model by far. The head and the loss therefore run over row
// chunks of at most `chunk` rows and never hold more than one chunk's logits: forward computes each
// chunk's logits, its per-row losses and drops them; backward recomputes each chunk's logits (one
// more head GEMM: 2·R·C·V FLOPs), turns them into dlogits in place and multiplies them out into dx
// and dw. The memory plan is R·4 bytes of per-row losses instead of R·V logits; the price is the
// recomputed GEMM.

// LMHeadChunkRows is the default chunk on dev: on a GPU, rows whose logits take about 384 MiB in
// dt, rounded up to a multiple of 256 rows (GEMM tiles) where there are that many — 4096 rows of
// GPT-2's 50304 in f16, 2048 in f32; on a device of host memory (the CPU) about 128 MiB, as
// before session 19. Larger chunks give the lm_head's weight-gradient GEMM (dW += dlogitsᵀ·x) a
// longer reduction: on an H100, 4096 rows against 128 MiB's 1334 measured −1.75 ms at b16 and
// −0.77 at b8 for +0.26 GiB of peak; the whole batch at once (16384 rows) −2.0 ms for +1.4 GiB
// (docs/perf-gpu.md, "Measured: session 19"). The CPU's GEMM was not measured to gain from it,
// so its memory stays as it was.
func LMHeadChunkRows(dev tensor.Device, vocab int, dt tensor.DType) int {
	if _, host := dev.(tensor.HostMemory); host {
		return max(1, (128<<20)/(vocab*dt.Size()))
	}
	rows := (384 << 20) / (vocab * dt.Size())
	if rows >= 256 {
		rows = (rows + 255) / 256 * 256
	}
	return max(1, rows)
}

// LMHeadLossForward: loss (1) f32 = Σ_rows −log softmax(x·wᵀ)[target] / count.
// x (R,C) f32 or f16 (the logits take its dtype), w (V,C), targets (R) i32 (negative = ignore),
// losses (R) f32 scratch, count as in CrossEntropyForward, chunk rows at a time.
func LMHeadLossForward(dev tensor.Device, loss, losses, x, w, targets *tensor.Tensor, count, chunk int) {
	R, C, V := x.Rows(), x.Cols(), w.Dim(0)
	x2, t1 := x.Reshape(R, C), targets.Reshape(R)
	for r0 := 0; r0 < R; r0 += chunk {
		n := min(chunk, R-r0)
		logits := dev.Alloc(x.DType(), "logits.chunk", n, V)
		LinearForward(dev, logits, x2.View(r0*C, n, C), w, nil)
		dev.CrossEntropy(losses.View(r0, n), logits, t1.View(r0, n))
		dev.Free(logits)
	}
	dev.Fill(loss, 0)
	dev.Sum(loss, losses)
	if count > 0 {
		dev.Scale(loss, 1/float32(count))
	}
}

// LMHeadLossBackward: dx (R,C) (overwritten) and dw (V,C) f32 (accumulates) of dloss·loss, with
// x, w, targets, count and chunk as in the forward, whose logits it recomputes chunk by chunk.
func LMHeadLossBackward(dev tensor.Device, dx, dw, x, w, targets *tensor.Tensor, dloss float32, count, chunk int) {
	R, C, V := x.Rows(), x.Cols(), w.Dim(0)
	x2, dx2, t1 := x.Reshape(R, C), dx.Reshape(R, C), targets.Reshape(R)
	for r0 := 0; r0 < R; r0 += chunk {
		n := min(chunk, R-r0)
		xc := x2.View(r0*C, n, C)
		dlogits := dev.Alloc(x.DType(), "dlogits.chunk", n, V)
		LinearForward(dev, dlogits, xc, w, nil) // the chunk's logits again
		CrossEntropyBackward(dev, dlogits, dlogits, t1.View(r0, n), dloss, count)
		LinearBackward(dev, dx2.View(r0*C, n, C), dw, nil, dlogits, xc, w)
		dev.Free(dlogits)
	}
}

// LMHeadLossForwardBackward is LMHeadLossForward followed by LMHeadLossBackward with the logits
// of each chunk computed once: the loss as in the forward, dx (overwritten) and dw (accumulated)
// as in the backward, to the bit (the same operations in the same order; only the recompute of the
// logits is gone).
func LMHeadLossForwardBackward(dev tensor.Device, loss, losses, dx, dw, x, w, targets *tensor.Tensor, dloss float32, count, chunk int) {
	R, C, V := x.Rows(), x.Cols(), w.Dim(0)
	x2, dx2, t1 := x.Reshape(R, C), dx.Reshape(R, C), targets.Reshape(R)
	for r0 := 0; r0 < R; r0 += chunk {
		n := min(chunk, R-r0)
		xc := x2.View(r0*C, n, C)
		logits := dev.Alloc(x.DType(), "logits.chunk", n, V)
		LinearForward(dev, logits, xc, w, nil)
		if cg, ok := dev.(tensor.CrossEntropyGrad); ok { // the same bits, fewer passes
			cg.CrossEntropyWithGrad(losses.View(r0, n), logits, logits, t1.View(r0, n), crossEntropyScale(dloss, count))
		} else {
			dev.CrossEntropy(losses.View(r0, n), logits, t1.View(r0, n))
			CrossEntropyBackward(dev, logits, logits, t1.View(r0, n), dloss, count) // dlogits in place
		}
		LinearBackward(dev, dx2.View(r0*C, n, C), dw, nil, logits, xc, w)
		dev.Free(logits)
	}
	dev.Fill(loss, 0)
	dev.Sum(loss, losses)
	if count > 0 {
		dev.Scale(loss, 1/float32(count))
	}
}

// LMHeadArgMax: out (R) i32 = argmax over V of x·wᵀ, chunk rows at a time.
func LMHeadArgMax(dev tensor.Device, out, x, w *tensor.Tensor, chunk int) {
	R, C, V := x.Rows(), x.Cols(), w.Dim(0)
	x2, o1 := x.Reshape(R, C), out.Reshape(R)
	for r0 := 0; r0 < R; r0 += chunk {
		n := min(chunk, R-r0)
		logits := dev.Alloc(x.DType(), "logits.chunk", n, V)
		LinearForward(dev, logits, x2.View(r0*C, n, C), w, nil)
		dev.ArgMax(o1.View(r0, n), logits)
		dev.Free(logits)
	}
}
