package checkpoint

// weights.go: a checkpoint's tensors into a model and out of it. LoadWeights is goddp's one
// weight loader for checkpoints (the resume, ddptrain eval, ddptrain sample): the parameters go
// through model.Params.LoadNamed, which checks every name, shape and dtype before writing any.

import (
	"fmt"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// LoadWeights sets ps, and bufs when not nil (the model's BatchNorm running statistics), from the
// checkpoint's weights. Every parameter and buffer must be there with its shape, and every
// tensor of the checkpoint must be one of them; errors name the tensor and the checkpoint, and
// nothing is written unless all are good.
func LoadWeights(ck *Checkpoint, ps *model.Params, bufs *model.Buffers) error {
	params := ck.Weights
	var bufLoads []tensorLoad
	if bufs != nil {
		byName := map[string]model.NamedTensor{}
		for _, t := range ck.Weights {
			byName[t.Name] = t
		}
		for _, b := range bufs.List {
			nt, ok := byName[b.Name]
			if !ok {
				return fmt.Errorf("checkpoint: %s has no buffer %q", ck.Path, b.Name)
			}
			v, err := namedToF32(nt, b.T)
			if err != nil {
				return fmt.Errorf("checkpoint: %s: %w", ck.Path, err)
			}
			bufLoads = append(bufLoads, tensorLoad{b.T, v})
			delete(byName, b.Name)
		}
		params = params[:0:0]
		for _, t := range ck.Weights { // the checkpoint's order, less the buffers
			if _, ok := byName[t.Name]; ok {
				params = append(params, t)
			}
		}
	}
	if err := ps.LoadNamed(params); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", ck.Path, err)
	}
	upload(ps.Device(), bufLoads)
	return nil
}

// tensorLoad is a tensor to fill and the values for it.
type tensorLoad struct {
	t    *tensor.Tensor
	vals []float32
}

// upload writes the loads to the device.
func upload(dev tensor.Device, loads []tensorLoad) {
	for _, l := range loads {
		dev.Upload(l.t, l.vals)
	}
}

// tensorToNamed is t as a host f32 named tensor, for a checkpoint file.
func tensorToNamed(name string, t *tensor.Tensor) model.NamedTensor {
	return model.NamedTensor{Name: name, DType: tensor.F32, Shape: append([]int(nil), t.Shape()...), Data: model.F32Bytes(tensor.ToHost(t))}
}

// namedToF32 is a checkpoint tensor's values for want: f32, of want's shape.
func namedToF32(nt model.NamedTensor, want *tensor.Tensor) ([]float32, error) {
	return namedToF32Shape(nt, want.Shape())
}

// namedToF32Shape is a checkpoint tensor's values, f32 of the given shape.
func namedToF32Shape(nt model.NamedTensor, shape []int) ([]float32, error) {
	if nt.DType != tensor.F32 {
		return nil, fmt.Errorf("tensor %q is %s, want f32", nt.Name, nt.DType)
	}
	n := 1
	for _, d := range nt.Shape {
		n *= d
	}
	if n != tensor.Numel(shape) || fmt.Sprint(nt.Shape) != fmt.Sprint(shape) {
		return nil, fmt.Errorf("tensor %q has shape %v, the model wants %v", nt.Name, nt.Shape, shape)
	}
	return model.BytesF32(nt.Data), nil
}
