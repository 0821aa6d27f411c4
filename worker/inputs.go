package worker

import (
	"unsafe"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/data"
)

// inputs holds the device tensors a micro-batch is uploaded into, sized for the largest batch;
// each upload points Inputs at views of the batch's real size (an eval tail can be smaller).
type inputs struct {
	model.Inputs
	x, tokens, targets, pred *tensor.Tensor
	features, T              int
	cap                      int
	// async, when the device has one, uploads from the batch's (pinned) buffers without blocking
	// (pinned.go); the batch must then stay unreleased until the device has passed the copy.
	async func(dst *tensor.Tensor, src unsafe.Pointer)
}

func newInputs(dev tensor.Device, shape model.Input, b int) *inputs {
	in := &inputs{cap: b, async: asyncUploader(dev)}
	if shape.Tokens > 0 {
		in.T = shape.Tokens
		in.tokens = dev.Alloc(tensor.I32, "batch.tokens", b, in.T)
		in.targets = dev.Alloc(tensor.I32, "batch.targets", b, in.T)
		in.pred = dev.Alloc(tensor.I32, "batch.pred", b*in.T)
	} else {
		in.features = shape.Features()
		in.x = dev.Alloc(tensor.F32, "batch.x", b, in.features)
		in.targets = dev.Alloc(tensor.I32, "batch.y", b)
		in.pred = dev.Alloc(tensor.I32, "batch.pred", b)
	}
	return in
}

// upload copies batch to the device and returns the number of targets (samples or tokens).
func (in *inputs) upload(dev tensor.Device, b *data.Batch, seed uint64) int {
	n := in.load(dev, b)
	in.Inputs.Seed = seed
	return n
}

// load copies batch to the device and points Inputs at it (Seed and GradScale zero: the
// micro-step that trains on it sets them), returning the number of targets.
func (in *inputs) load(dev tensor.Device, b *data.Batch) int {
	n := b.Size
	in.Inputs = model.Inputs{}
	if in.tokens != nil {
		tok := in.tokens.View(0, n, in.T)
		tgt := in.targets.View(0, n, in.T)
		if in.async != nil {
			in.async(tok, unsafe.Pointer(unsafe.SliceData(b.Tokens)))
			in.async(tgt, unsafe.Pointer(unsafe.SliceData(b.Targets)))
		} else {
			dev.UploadI32(tok, b.Tokens[:n*in.T])
			dev.UploadI32(tgt, b.Targets[:n*in.T])
		}
		in.Tokens, in.Targets = tok, tgt
		in.Valid = n * in.T
		return n * in.T
	}
	x := in.x.View(0, n, in.features)
	y := in.targets.View(0, n)
	if in.async != nil {
		in.async(x, unsafe.Pointer(unsafe.SliceData(b.X)))
		in.async(y, unsafe.Pointer(unsafe.SliceData(b.Y)))
	} else {
		dev.Upload(x, b.X[:n*in.features])
		dev.UploadI32(y, b.Y[:n])
	}
	in.X, in.Targets = x, y
	in.Valid = n
	return n
}

func (in *inputs) free(dev tensor.Device) {
	for _, t := range []*tensor.Tensor{in.x, in.tokens, in.targets, in.pred} {
		if t != nil {
			dev.Free(t)
		}
	}
}
