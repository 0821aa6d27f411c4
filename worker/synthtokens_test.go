package worker

import (
	"math"
	"testing"
)

// data.kind synthetic-tokens: a gpt trains on made-up windows of its vocabulary's ids (nothing
// read), two runs with one seed end with the same weights, another seed with others, and the
// loss is finite and near ln V or under it (uniform targets: nothing to learn but memorisation).
func TestSyntheticTokens_trainsAndRepeats(t *testing.T) {
	sets := []string{"data.kind=synthetic-tokens", "data.path=", "model.vocab=512", "train.max_steps=20", "train.lr=0.01", "train.eval_batches=1"}
	a := mustRun(t, tinyGPT(t, sets...), Options{})
	b := mustRun(t, tinyGPT(t, sets...), Options{})
	c := mustRun(t, tinyGPT(t, append(sets, "seed=99")...), Options{})
	if a.ParamSHA256 != b.ParamSHA256 || a.FinalLoss != b.FinalLoss {
		t.Errorf("one seed, two runs: %s loss %g, %s loss %g", a.ParamSHA256, a.FinalLoss, b.ParamSHA256, b.FinalLoss)
	}
	if c.ParamSHA256 == a.ParamSHA256 {
		t.Error("another seed trained the same weights")
	}
	if a.FinalLoss <= 0 || math.IsNaN(a.FinalLoss) || a.FinalLoss > 1.2*math.Log(512) {
		t.Errorf("final loss %g, ln V = %.3f", a.FinalLoss, math.Log(512))
	}
}
