package model

import (
	"fmt"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// countingColSum is the CPU device with its LayerNormBackwardColSum calls counted.
type countingColSum struct {
	*cpu.Device
	n int
}

func (d *countingColSum) LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s *tensor.Tensor) {
	d.n++
	d.Device.LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s)
}

// The residual projections' bias gradients summed in the layer norms' backward that write their
// output gradient (tensor.LNBackwardColSummer: ln2's for the attention's projection, the block
// above's ln1 or lnf for the MLP's) train a GPT to the same bits as the projections summing them
// themselves: losses and parameters after AdamW steps, f32, f16 and bf16, with and without
// checkpointing; the parameters report ready in the same order, the peak is no higher. The counter
// shows it ran: per step lnf, every ln2 and every ln1 but the first block's (2 per layer); with
// residual dropout (the projections' output gradient is then not dres) it is not taken at all.
func TestGPT_lnColSumSameAsProjections(t *testing.T) {
	for _, compute := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for _, ckpt := range []int{0, 1} {
			for _, dropout := range []float32{0, 0.1} {
				name := fmt.Sprintf("%s checkpoint %d dropout %g", compute, ckpt, dropout)
				dev := &countingColSum{Device: cpu.New()}
				got, ref := trainWithEnv(t, "GODDP_LN_COLSUM", dev, foldGPT(compute, ckpt, dropout))
				sameGPTRun(t, name+": summed in the layer norms", got, ref)
				want := foldSteps * 2 * foldLayers
				if dropout > 0 {
					want = 0
				}
				if dev.n != want {
					t.Errorf("%s: %d LayerNormBackwardColSum calls, want %d", name, dev.n, want)
				}
			}
		}
	}
}

// lnColSummer takes the device's summer only where every block can use it, and marks both
// projections of each block, the block below linked; GODDP_LN_COLSUM=0, residual dropout or
// model.gemm_epilogue leave the model as it was.
func TestGPT_lnColSummerWhere(t *testing.T) {
	build := func(env string, cfg GPTConfig) *GPT {
		t.Setenv("GODDP_LN_COLSUM", env)
		m, err := NewGPT(cpu.New(), cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Free)
		return m
	}
	m := build("", foldGPT(tensor.F32, 0, 0))
	if m.colSum == nil {
		t.Fatal("not taken on the CPU device by default")
	}
	for l, b := range m.Blocks {
		if b.ColSum == nil || !b.Proj.BiasSummed || !b.Attn.Proj.BiasSummed || b.FC.BiasSummed || b.Attn.QKV.BiasSummed {
			t.Errorf("block %d: ColSum %v, summed proj %v attn.proj %v fc %v qkv %v", l, b.ColSum != nil, b.Proj.BiasSummed, b.Attn.Proj.BiasSummed, b.FC.BiasSummed, b.Attn.QKV.BiasSummed)
		}
		if want := (*Block)(nil); l > 0 {
			want = m.Blocks[l-1]
			if b.Below != want {
				t.Errorf("block %d: Below is not block %d", l, l-1)
			}
		} else if b.Below != nil {
			t.Errorf("block 0 has a block below")
		}
	}
	gemm := foldGPT(tensor.F32, 0, 0)
	gemm.GemmEpilogue = true
	for what, m := range map[string]*GPT{"GODDP_LN_COLSUM=0": build("0", foldGPT(tensor.F32, 0, 0)), "dropout": build("", foldGPT(tensor.F32, 0, 0.1)), "gemm_epilogue": build("", gemm)} {
		if m.colSum != nil || m.Blocks[0].ColSum != nil || m.Blocks[0].Proj.BiasSummed {
			t.Errorf("%s: taken", what)
		}
	}
}
