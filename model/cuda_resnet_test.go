//go:build cuda && cudnn

package model

import (
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// A small ResNet trained a few SGD steps on the GPU (cuDNN's convolutions, the device's batch
// norm and pools) follows the CPU's: each step's loss within 1e-4 relative in f32 (NCHW and
// NHWC), 2e-2 in f16 (NHWC, channels last: the tensor-core path), and eval mode's loss after the
// steps too. Not yet run on a GPU.
func TestCUDA_resnetMatchesCPU(t *testing.T) {
	g := gpu(t)
	for _, tc := range []struct {
		cfg ResNetConfig
		tol float64
	}{
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F32}, 1e-4},
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F32, Layout: tensor.NHWC}, 1e-4},
		{ResNetConfig{Depth: 50, Stem: "imagenet", Width: 8, Classes: 5, InC: 3, InH: 32, InW: 32, Compute: tensor.F16, Layout: tensor.NHWC, Checkpoint: 1}, 2e-2},
	} {
		losses := func(dev tensor.Device) []float32 {
			m, err := NewResNet(dev, tc.cfg, 9)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			opt, err := NewSGD(m.Params(), SGDConfig{Momentum: 0.9})
			if err != nil {
				t.Fatal(err)
			}
			in := resnetInputs(dev, rand.New(rand.NewSource(3)), 8, tc.cfg)
			var out []float32
			for range 4 {
				m.Params().ZeroGrad()
				out = append(out, tensor.ToHost(m.Forward(in, true))[0])
				m.Backward(1)
				opt.Step(0.02)
			}
			return append(out, tensor.ToHost(m.Forward(in, false))[0])
		}
		want, got := losses(cpu.New()), losses(g)
		for i := range want {
			if d := math.Abs(float64(got[i]-want[i])) / math.Max(math.Abs(float64(want[i])), 1e-6); !(d <= tc.tol) {
				t.Errorf("%+v: loss %d on the GPU %v, CPU %v (relative %g > %g)", tc.cfg, i, got[i], want[i], d, tc.tol)
			}
		}
	}
}
