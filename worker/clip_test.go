package worker

import "testing"

// Gradient clipping folded into AdamW's step (model.GradScaledStepper, the CPU device) trains the
// very weights that clipping by a pass over the gradients first trains, fp32 and fp16; and the
// clipping is real: at train.grad_clip 0.05 (norms here are ~1-3) the weights differ from an
// unclipped run's.
func TestClipFused_sameWeightsAsAPass(t *testing.T) {
	for _, prec := range []string{"fp32", "fp16"} {
		run := func(clip string, noFused bool) *Result {
			cfg := tinyGPT(t, "precision="+prec, "train.max_steps=4", "train.grad_clip="+clip, "checkpoint.dir=")
			return mustRun(t, cfg, Options{noFusedClip: noFused})
		}
		fused, pass, none := run("0.05", false), run("0.05", true), run("0", false)
		if fused.ParamSHA256 != pass.ParamSHA256 || fused.FinalLoss != pass.FinalLoss {
			t.Errorf("%s: clipped in the step %s (loss %g), by a pass %s (loss %g)", prec, fused.ParamSHA256[:12], fused.FinalLoss, pass.ParamSHA256[:12], pass.FinalLoss)
		}
		if fused.ParamSHA256 == none.ParamSHA256 {
			t.Errorf("%s: grad_clip 0.05 trained the weights of no clipping: nothing was clipped", prec)
		}
	}
}
