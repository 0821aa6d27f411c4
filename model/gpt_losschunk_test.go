package model

import (
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// The head and loss in chunks of rows give the unchunked loss to the bit (the per-row losses are
// the same numbers, summed in the same order) and the same gradients within f32 rounding (the head
// GEMMs sum over rows chunk by chunk); the peak holds one chunk's logits instead of all of them.
func TestGPT_lossChunksMatchWhole(t *testing.T) {
	const B, T, V = 3, 8, 200
	type result struct {
		loss  float32
		grads []float32
		pred  []int32
		peak  int64
	}
	run := func(chunk int, tied bool, dt tensor.DType) result {
		dev := cpu.New()
		rng := rand.New(rand.NewSource(9))
		m, err := NewGPT(dev, GPTConfig{Layers: 2, Width: 16, Heads: 2, Context: T, Vocab: V, Tied: tied, Compute: dt, LossChunk: chunk}, 4)
		if err != nil {
			t.Fatal(err)
		}
		in := gptInputs(dev, rng, B, T, V)
		base := dev.Stats().Allocated
		dev.ResetPeak()
		m.Params().ZeroGrad()
		loss := tensor.ToHost(m.Forward(in, true))[0]
		out := dev.Alloc(tensor.I32, "pred", B*T)
		m.Predict(out)
		pred := make([]int32, B*T)
		dev.DownloadI32(pred, out)
		dev.Free(out)
		m.Backward(1)
		r := result{loss, tensor.ToHost(m.Params().Grad), pred, dev.Stats().Peak - base}
		if kept := dev.Stats().Allocated - base; kept != 0 {
			t.Fatalf("chunk %d: %s kept after backward", chunk, tensor.FormatBytes(kept))
		}
		m.Free()
		return r
	}
	for _, tc := range []struct {
		tied bool
		dt   tensor.DType
		tol  float64
	}{{true, tensor.F32, 1e-6}, {false, tensor.F32, 1e-6}, {true, tensor.F16, 1e-3}} {
		whole := run(B*T, tc.tied, tc.dt)
		for _, chunk := range []int{1, 5, 7} { // 5 and 7 leave a partial last chunk
			got := run(chunk, tc.tied, tc.dt)
			if math.Float32bits(got.loss) != math.Float32bits(whole.loss) {
				t.Errorf("tied %v %s chunk %d: loss %v, whole %v", tc.tied, tc.dt, chunk, got.loss, whole.loss)
			}
			if e := relNorm(got.grads, whole.grads); e > tc.tol {
				t.Errorf("tied %v %s chunk %d: gradients differ by %.3g relative", tc.tied, tc.dt, chunk, e)
			}
			for i := range got.pred {
				if got.pred[i] != whole.pred[i] {
					t.Fatalf("tied %v %s chunk %d: prediction %d is %d, whole %d", tc.tied, tc.dt, chunk, i, got.pred[i], whole.pred[i])
				}
			}
			if got.peak >= whole.peak {
				t.Errorf("tied %v %s chunk %d: peak %s not below the unchunked %s", tc.tied, tc.dt, chunk, tensor.FormatBytes(got.peak), tensor.FormatBytes(whole.peak))
			}
		}
	}
}
