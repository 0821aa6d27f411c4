package checkpoint

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
)

// init_from compares a ResNet's whole architecture now, and still takes a ResNet checkpoint of an
// earlier build, whose spec held only the kind.
func TestSameModel_resnet(t *testing.T) {
	// configs/mnist-resnet.yaml with model.width=4, as worker.ModelSpec describes it.
	run := model.Spec{Format: model.SpecFormat, Kind: model.SpecKindResNet, DType: "f32", Names: "goddp",
		Depth: 18, Stem: "small", Width: 4, Classes: 10, Image: []int{1, 28, 28}}
	old, err := model.ParseSpec([]byte(`{"format":"goddp","kind":"resnet","dtype":"f32","names":"goddp","activation":"","linear_layout":"","input_normalization":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameModel(old, run); err != nil {
		t.Errorf("an earlier build's ResNet checkpoint: %v", err)
	}
	if err := sameModel(run, run); err != nil {
		t.Error(err)
	}
	other := run
	other.Depth, other.Image = 34, []int{3, 32, 32}
	if err := sameModel(other, run); err == nil || !strings.Contains(err.Error(), "depth 34, the run's 18") || !strings.Contains(err.Error(), "image [3 32 32]") {
		t.Errorf("another ResNet: %v", err)
	}
	gpt := model.GPTConfig{Layers: 2, Width: 32, Heads: 2, Context: 16, Vocab: 64}.Spec()
	if err := sameModel(old, gpt); err == nil || !strings.Contains(err.Error(), "kind resnet, the run's gpt") {
		t.Errorf("a ResNet checkpoint for a GPT run: %v", err)
	}
}
