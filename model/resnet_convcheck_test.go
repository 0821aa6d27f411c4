package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// noBF16Conv is the CPU device refusing to convolve in bf16, as the CUDA device does (it computes
// in bf16 but its cuDNN convolutions run in f32 and f16 only).
type noBF16Conv struct{ *cpu.Device }

func (noBF16Conv) CheckConvCompute(dt tensor.DType) error {
	if dt == tensor.BF16 {
		return errors.New("no bf16 convolutions here")
	}
	return nil
}

// NewResNet asks a device that can say so whether it convolves in the compute dtype: bf16 is
// refused with an error naming ResNetConfig.Compute, f16 is built.
func TestResNet_refusesAComputeTheDeviceCannotConvolveIn(t *testing.T) {
	cfg := ResNetConfig{Depth: 18, Stem: "small", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8, Compute: tensor.BF16}
	_, err := NewResNet(noBF16Conv{cpu.New()}, cfg, 1)
	if err == nil || !strings.Contains(err.Error(), "ResNetConfig.Compute = bf16") || !strings.Contains(err.Error(), "no bf16 convolutions here") {
		t.Fatalf("NewResNet in bf16 on a device without bf16 convolutions: %v", err)
	}
	cfg.Compute = tensor.F16
	m, err := NewResNet(noBF16Conv{cpu.New()}, cfg, 1)
	if err != nil {
		t.Fatalf("NewResNet in f16: %v", err)
	}
	m.Free()
}
