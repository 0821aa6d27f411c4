//go:build cuda && cudnn

package model

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// A small ResNet on the GPU (cuDNN's convolutions, the device's batch norm and pools) against the
// CPU: the first training step's loss and gradients (relative L2 over the gradient slab), then in
// f32 four SGD steps and eval mode's loss. Measured on the H200 (2026-12-05): f32 gradients within
// 1.4e-6 (ResNet-18, NCHW and NHWC) and 1.9e-4 (ResNet-50 NHWC with checkpointing); f16 ResNet-18
// within 0.05 (NCHW) and 0.07 (NHWC), the worst parameters BN gains (their gradient Σdy·x̂ cancels,
// and dy differs by f16 roundings between cuDNN and the CPU), the loss within 3e-4. A ResNet-50 on
// 32×32 inputs in f16 is not compared: its last stage normalises over 8 values and amplifies each
// f16 rounding (its f32 run matches; several f16 steps without a loss scaler reach NaN on the CPU
// too).
func TestCUDA_resnetMatchesCPU(t *testing.T) {
	g := gpu(t)
	for _, tc := range []struct {
		cfg        ResNetConfig
		tol, gtol  float64
		trainSteps bool
	}{
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F32}, 1e-4, 1e-4, true},
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F32, Layout: tensor.NHWC}, 1e-4, 1e-4, true},
		{ResNetConfig{Depth: 50, Stem: "imagenet", Width: 8, Classes: 5, InC: 3, InH: 32, InW: 32, Compute: tensor.F32, Layout: tensor.NHWC, Checkpoint: 1}, 1e-4, 1e-3, false},
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F16}, 2e-3, 0.15, false},
		{ResNetConfig{Depth: 18, Stem: "small", Width: 8, Classes: 5, InC: 1, InH: 12, InW: 12, Compute: tensor.F16, Layout: tensor.NHWC}, 2e-3, 0.15, false},
	} {
		type result struct {
			losses []float32
			grad   []float32
		}
		run := func(dev tensor.Device) result {
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
			var r result
			m.Params().ZeroGrad()
			r.losses = append(r.losses, tensor.ToHost(m.Forward(in, true))[0])
			m.Backward(1)
			r.grad = tensor.ToHost(m.Params().Grad)
			if !tc.trainSteps {
				return r
			}
			opt.Step(0.02)
			for range 3 {
				m.Params().ZeroGrad()
				r.losses = append(r.losses, tensor.ToHost(m.Forward(in, true))[0])
				m.Backward(1)
				opt.Step(0.02)
			}
			r.losses = append(r.losses, tensor.ToHost(m.Forward(in, false))[0])
			return r
		}
		want, got := run(cpu.New()), run(g)
		for i := range want.losses {
			if d := math.Abs(float64(got.losses[i]-want.losses[i])) / math.Max(math.Abs(float64(want.losses[i])), 1e-6); !(d <= tc.tol) {
				t.Errorf("%+v: loss %d on the GPU %v, CPU %v (relative %g > %g)", tc.cfg, i, got.losses[i], want.losses[i], d, tc.tol)
			}
		}
		var num, den float64
		for i := range want.grad {
			d := float64(got.grad[i]) - float64(want.grad[i])
			num += d * d
			den += float64(want.grad[i]) * float64(want.grad[i])
		}
		if e := math.Sqrt(num / math.Max(den, 1e-30)); !(e <= tc.gtol) {
			t.Errorf("%+v: first step's gradients: relative L2 %g > %g", tc.cfg, e, tc.gtol)
		} else {
			t.Logf("%+v: first step's gradients within relative L2 %.2g", tc.cfg, e)
		}
	}
}

// TestCUDA_resnet50Profile prints where one ResNet-50 training step's GPU time goes, kernel by
// kernel (and cuDNN call by call): GODDP_RESNET_PROFILE=B (a batch, e.g. 64) runs it, in fp16
// NHWC at 224², SGD with momentum, after three warm-up steps; GODDP_RESNET_PROFILE_DTYPE=f32 for
// fp32. Skipped otherwise. Diagnostics for issue 33 (docs/perf-resnet-gpu.md), not a check.
func TestCUDA_resnet50Profile(t *testing.T) {
	s := os.Getenv("GODDP_RESNET_PROFILE")
	if s == "" {
		t.Skip("GODDP_RESNET_PROFILE=B runs it")
	}
	var B int
	if _, err := fmt.Sscan(s, &B); err != nil || B <= 0 {
		t.Fatalf("GODDP_RESNET_PROFILE=%q: want a batch size", s)
	}
	g := gpu(t)
	dt := tensor.F16
	if os.Getenv("GODDP_RESNET_PROFILE_DTYPE") == "f32" {
		dt = tensor.F32
	}
	cfg := ResNetConfig{Depth: 50, Stem: "imagenet", Width: 64, Classes: 1000, InC: 3, InH: 224, InW: 224, Compute: dt, Layout: tensor.NHWC}
	m, opt := newResNetSGD(t, g, cfg, 1)
	in := resnetInputs(g, rand.New(rand.NewSource(1)), B, cfg)
	step := func() {
		m.Params().ZeroGrad()
		m.Forward(in, true)
		m.Backward(1)
		opt.Step(0.01)
	}
	for range 3 {
		step()
	}
	// Five plain steps: each one's time to the synchronised end, and the host's time to enqueue
	// it (before the Sync). Where the two are close, the host is what bounds the step.
	var steps, enq []float64
	for range 5 {
		g.Sync()
		t0 := time.Now()
		step()
		enq = append(enq, float64(time.Since(t0).Microseconds())/1000)
		g.Sync()
		steps = append(steps, float64(time.Since(t0).Microseconds())/1000)
	}
	sort.Float64s(steps)
	sort.Float64s(enq)
	g.ProfileStart()
	step()
	fmt.Printf("ResNet-50 %s NHWC batch %d on %s: one step %.2f ms unprofiled (median of 5; the host enqueues it in %.2f ms); profile (events around each kernel):\n%s",
		dt, B, g.DeviceName(), steps[2], enq[2], g.ProfileStop())
	for _, m := range g.PlanMisses() {
		fmt.Println("left to cuDNN's legacy calls:", m)
	}
}
