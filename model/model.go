package model

import "github.com/goddp/goddp/model/tensor"

// Inputs is one micro-batch on the device.
type Inputs struct {
	X       *tensor.Tensor // MLP: (B,In) f32; ResNet: (B,C·H·W) f32, read as (B,C,H,W) (Model.Input)
	Tokens  *tensor.Tensor // GPT: (B,T) i32
	Targets *tensor.Tensor // classifiers: (B) i32; GPT: (B,T) i32; negative = ignore (Model.TargetsPerSample)

	// Valid is the number of targets ≥ 0 when the caller knows it (it has them on the host);
	// 0 makes Forward count them, which waits for the device.
	Valid int
	// Seed draws this forward's dropout masks (mixed with the model's seed). Pass a distinct value
	// per micro-step and rank, e.g. DeriveSeed(runSeed, fmt.Sprint(step, micro, rank)); equal
	// seeds give equal masks, which is what makes a resumed run repeat an uninterrupted one.
	Seed uint64
	// GradScale, when not 0 on a training Forward, is the scale the following Backward will be
	// given. A model that can (GPT) then runs its loss head's backward inside the forward, while
	// the head's logits are at hand, instead of recomputing them in Backward (llm.c's fused
	// classifier). Same gradients to the bit; Backward panics if given a different scale.
	GradScale float32
}

// Model is what the trainer drives. Life cycle per optimizer step:
//
//	ps.ZeroGrad()                       // micro-step 0
//	loss := m.Forward(in, true)         // (1) f32 mean loss on the device
//	m.Backward(lossScale / accumSteps)  // grads accumulate in ps.Grad; Param.Ready fires as they finish
//	scaler.UnscaleCheck(ps) → Update    // mixed precision
//	opt.Step(lr)
//
// Forward with train = false saves nothing (evaluation). A Model is driven by one goroutine.
type Model interface {
	Params() *Params
	// Forward returns the mean loss (1) f32 on the device, valid until the next Forward. With train
	// it saves what Backward needs. It keeps the logits until the next Forward for Predict.
	Forward(in Inputs, train bool) *tensor.Tensor
	// Backward adds d(scale·mean loss)/dθ into the gradient slab, frees the saved activations and
	// calls Param.Ready as each parameter's gradient completes. scale = loss scale / accumulation.
	Backward(scale float32)
	// Predict writes the ArgMax of the last Forward's logits into out: (B) i32 for the MLP,
	// (B·T) i32 for the GPT (which must be called before Backward: see GPT.Predict).
	Predict(out *tensor.Tensor)
	// Free releases parameters and every buffer: the device's Allocated returns to what it was
	// before the model was built.
	Free()

	// What a trainer needs to know of a model, so that its batches, evaluation and metrics need
	// no switch on the kind (each the same as the model's Spec says: Spec.Input, ...).

	// Input is one sample's input: Inputs.Tokens (B,T) i32 or Inputs.X (B,features) f32.
	Input() Input
	// TargetsPerSample is the targets (and Predict's outputs) per sample: 1 for a classifier,
	// T = Context for a GPT's sequence (its loss is per token).
	TargetsPerSample() int
	// Classifier reports whether the model classifies samples (MLP, ResNet: one class per sample,
	// so accuracy means something), rather than predicting every token of a sequence (GPT).
	Classifier() bool
}

// Input is the shape of one sample's input, what a trainer allocates and uploads per sample.
// Exactly one of Tokens and Shape is set.
type Input struct {
	// Tokens is the token ids per sample (GPT: Context): Inputs.Tokens is (B,Tokens) i32.
	Tokens int
	// Shape is one sample's float features (MLP: (In); ResNet: one image (C,H,W)): Inputs.X is
	// (B, Features()) f32.
	Shape []int
}

// Features is the floats per sample: the product of Shape (0 for token inputs).
func (in Input) Features() int {
	if len(in.Shape) == 0 {
		return 0
	}
	n := 1
	for _, d := range in.Shape {
		n *= d
	}
	return n
}

// Image is one input image (C,H,W) when the samples are images (ok false otherwise).
func (in Input) Image() (c, h, w int, ok bool) {
	if len(in.Shape) != 3 {
		return 0, 0, 0, false
	}
	return in.Shape[0], in.Shape[1], in.Shape[2], true
}

var (
	_ Model = (*MLP)(nil)
	_ Model = (*GPT)(nil)
	_ Model = (*ResNet)(nil)
)

func (m *MLP) Input() Input             { return Input{Shape: []int{m.Cfg.Widths[0]}} }
func (m *MLP) TargetsPerSample() int    { return 1 }
func (m *MLP) Classifier() bool         { return true }
func (m *GPT) Input() Input             { return Input{Tokens: m.Cfg.Context} }
func (m *GPT) TargetsPerSample() int    { return m.Cfg.Context }
func (m *GPT) Classifier() bool         { return false }
func (m *ResNet) Input() Input          { return Input{Shape: []int{m.Cfg.InC, m.Cfg.InH, m.Cfg.InW}} }
func (m *ResNet) TargetsPerSample() int { return 1 }
func (m *ResNet) Classifier() bool      { return true }

// dropSeed is the dropout seed of one site (a tag like "h.3.attn.att") for one forward.
func dropSeed(modelSeed, forwardSeed uint64, site string) uint64 {
	return tensor.DeriveSeed(tensor.Mix64(modelSeed^tensor.Mix64(forwardSeed)), site)
}

// checkpointed reports whether stage i is recomputed in backward under policy every (0 none,
// 1 all, N every Nth starting with the first).
func checkpointed(every, i int) bool { return every > 0 && i%every == 0 }

func freeAll(dev tensor.Device, ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			dev.Free(t)
		}
	}
}
