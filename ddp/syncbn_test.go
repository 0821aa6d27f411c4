package ddp

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

type resnetStep struct {
	loss       float32
	grad, bufs []float32
}

// runResNetStep runs one training forward and backward of a small ResNet-18 (the same seed, so the
// same weights, on every rank) over x (n images of 2×8×8) and y, with sync set on its BatchNorms.
func runResNetStep(t *testing.T, x []float32, y []int32, n int, sync model.StatReducer, ckpt int, dt tensor.DType) resnetStep {
	dev := cpu.New()
	m, err := model.NewResNet(dev, model.ResNetConfig{Depth: 18, Stem: "small", Width: 4, Classes: 5, InC: 2, InH: 8, InW: 8, Compute: dt, Checkpoint: ckpt}, 3)
	if err != nil {
		t.Error(err)
		return resnetStep{}
	}
	if sync != nil && !model.SetStatReducer(m, sync) {
		t.Error("the ResNet says it has no BatchNorm")
	}
	X := tensor.FromHost(dev, tensor.F32, "x", x, n, 2*8*8)
	Y := dev.Alloc(tensor.I32, "y", n)
	dev.UploadI32(Y, y)
	loss := m.Forward(model.Inputs{X: X, Targets: Y, Valid: n}, true)
	m.Backward(1)
	if err := model.SyncErr(m); err != nil {
		t.Error(err)
	}
	return resnetStep{tensor.ToHost(loss)[0], tensor.ToHost(m.Params().Grad), tensor.ToHost(m.Buffers().Data)}
}

// A ResNet-18 with SyncBatchNorm over world 2 (in-process groups, ddp.StatReducer) × micro-batch
// b trains as world 1 × 2b: the mean of the ranks' losses is the 2b loss, the mean of the ranks'
// gradients (what DDP all-reduces) is the 2b gradient, and the BatchNorm buffers after the step
// are the 2b run's — bit-identical on both ranks. With activation checkpointing too (the
// recompute reduces its statistics again, in the same order on every rank).
//
// Tolerance: 2e-5 relative to each quantity's largest magnitude (the loss: relative to itself).
// The per-BatchNorm differences are f32 roundings (model's
// TestSyncBatchNorm_world2EqualsWorld1TwiceTheBatch: 2e-6), here compounded through 20
// BatchNorms and 20 convolutions whose sums run in another order (two batches of b instead of
// one of 2b) forward and backward; measured 1.8e-6 for the gradient and 2.4e-7 for the
// buffers, so 2e-5 leaves a 10× margin; per-rank statistics (no reducer) miss by far more (the loss
// alone by 20%). Under fp16 activations (BN statistics and parameters stay f32) the tolerance is
// 2e-3, four f16 epsilons (2⁻¹¹): the activations of b and 2b batches round alike, but every
// rounding of a sum taken in another order shows at f16's precision (measured 1.2e-4); under
// bf16, 1.6e-2, four bf16 epsilons (2⁻⁸) by the same rule (measured 2.3e-7: bf16's coarse
// rounding happened to land alike).
func TestSyncBatchNorm_resnetWorld2EqualsWorld1(t *testing.T) {
	const b = 4
	rng := rand.New(rand.NewSource(11))
	x := make([]float32, 2*b*2*8*8)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int32, 2*b)
	for i := range y {
		y[i] = int32(rng.Intn(5))
	}
	for _, c := range []struct {
		dt   tensor.DType
		ckpt int
		tol  float64
	}{{tensor.F32, 0, 2e-5}, {tensor.F32, 1, 2e-5}, {tensor.F16, 0, 2e-3}, {tensor.BF16, 0, 1.6e-2}} {
		ckpt, tol := c.ckpt, c.tol
		ref := runResNetStep(t, x, y, 2*b, nil, ckpt, c.dt)
		var got [2]resnetStep
		eachRank(t, 2, func(r int, g *allreduce.Group) {
			F := b * 2 * 8 * 8
			got[r] = runResNetStep(t, x[r*F:(r+1)*F], y[r*b:(r+1)*b], b, StatReducer(context.Background(), g), ckpt, c.dt)
		})
		if t.Failed() {
			return
		}
		if l := (got[0].loss + got[1].loss) / 2; math.Abs(float64(l-ref.loss)) > tol*math.Abs(float64(ref.loss)) {
			t.Fatalf("checkpoint %d: mean rank loss %g, world 1 loss %g", ckpt, l, ref.loss)
		}
		check := func(name string, got, want []float32) {
			var scale, worst float64
			for _, v := range want {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
			}
			if worst > tol*scale {
				t.Fatalf("%s checkpoint %d: %s: max |diff| %g > %g × %g", c.dt, ckpt, name, worst, tol, scale)
			}
			t.Logf("%s checkpoint %d: %s: max |diff| %.3g (%.3g of the scale)", c.dt, ckpt, name, worst, worst/scale)
		}
		avg := make([]float32, len(ref.grad))
		for i := range avg {
			avg[i] = (got[0].grad[i] + got[1].grad[i]) / 2
		}
		check("gradient (mean over ranks)", avg, ref.grad)
		check("BN buffers rank 0", got[0].bufs, ref.bufs)
		for i := range got[0].bufs {
			if got[0].bufs[i] != got[1].bufs[i] {
				t.Fatalf("checkpoint %d: BN buffers differ between the ranks at %d", ckpt, i)
			}
		}
	}
}
