//go:build cuda && !cudnn

package cuda

// Without the cudnn build tag the CUDA device has no convolutions: it does not implement
// tensor.ConvDevice, and a ResNet on it is refused by name (model.NewResNet). Build with
// `-tags cuda,cudnn` for conv.go's cuDNN-backed one (its tests pass on H100s: docs/perf-resnet-gpu.md).

type convState struct{}

func (d *Device) initConv() error { return nil }
func (d *Device) closeConv()      {}
