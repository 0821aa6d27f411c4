package model

// Softmax cross-entropy, fused and stable: the device computes log-softmax in f32 (f16 logits are
// widened), so mixed precision never takes the softmax or the loss out of f32.
//
// The loss is the mean over rows whose target is not negative (negative targets are ignored, as
// with PyTorch's ignore_index). Its gradient is seeded straight into the logits' place:
// dlogits = (softmax − onehot)·dloss/count.

// CrossEntropyForward: loss (1) f32 = Σ_rows −log softmax(logits)[target] / count.
// logits (R,V) f32 or f16, targets (R) i32 (negative = ignore), losses (R) f32 scratch,
// count = number of targets ≥ 0 (0 gives a loss of 0).
func CrossEntropyForward(dev Device, loss, losses, logits, targets *Tensor, count int) {
	dev.CrossEntropy(losses, logits, targets)
	dev.Fill(loss, 0)
	dev.Sum(loss, losses)
	if count > 0 {
		dev.Scale(loss, 1/float32(count))
	}
}

// CrossEntropyBackward: dlogits (R,V) = (softmax(logits) − onehot(targets))·dloss/count, zero on
// ignored rows. dlogits may be logits itself (the logits are then gone).
func CrossEntropyBackward(dev Device, dlogits, logits, targets *Tensor, dloss float32, count int) {
	s := float32(0)
	if count > 0 {
		s = dloss / float32(count)
	}
	dev.CrossEntropyBackward(dlogits, logits, targets, s)
}

// CountTargets returns how many targets (any shape, i32) are not negative. It reads the tensor back
// to the host, so it waits for the device; callers that know the count pass it in Inputs.Valid.
func CountTargets(targets *Tensor) int {
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
