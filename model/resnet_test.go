package model

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// noConv is a device without tensor.ConvDevice (as the CUDA device is for now).
type noConv struct{ tensor.Device }

func TestResNet_refusesADeviceWithoutConvolution(t *testing.T) {
	_, err := NewResNet(noConv{cpu.New()}, ResNetConfig{Depth: 18, Stem: "small", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8}, 1)
	if err == nil || !strings.Contains(err.Error(), "has no convolution yet") {
		t.Fatalf("NewResNet on a device without ConvDevice: %v", err)
	}
	for _, bad := range []ResNetConfig{
		{Depth: 20, Stem: "small", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8},
		{Depth: 18, Stem: "cifar", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8},
		{Depth: 18, Stem: "small", Width: 0, Classes: 3, InC: 1, InH: 8, InW: 8},
	} {
		if _, err := NewResNet(cpu.New(), bad, 1); err == nil {
			t.Errorf("NewResNet(%+v) took it", bad)
		}
	}
}

// A tiny ResNet fits a fixed batch: the loss falls, eval mode (running statistics) agrees with
// the labels it learned, and every buffer is back at the baseline after Free.
func TestResNet_trainsLossFalls(t *testing.T) {
	for _, cfg := range []ResNetConfig{
		{Depth: 18, Stem: "small", Width: 4, Classes: 3, InC: 1, InH: 12, InW: 12},
		{Depth: 50, Stem: "imagenet", Width: 2, Classes: 3, InC: 3, InH: 32, InW: 32, Checkpoint: 1},
	} {
		dev := cpu.New()
		base := dev.Stats().Allocated
		rng := rand.New(rand.NewSource(1))
		m, err := NewResNet(dev, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		opt, err := NewSGD(m.Params(), SGDConfig{Momentum: 0.9})
		if err != nil {
			t.Fatal(err)
		}
		in := resnetInputs(dev, rng, 16, cfg)
		var first, last float32
		for step := 0; step < 40; step++ {
			m.Params().ZeroGrad()
			l := tensor.ToHost(m.Forward(in, true))[0]
			m.Backward(1)
			opt.Step(0.05)
			if step == 0 {
				first = l
			}
			last = l
		}
		if !(last < first/4) || math.IsNaN(float64(last)) {
			t.Errorf("resnet%d: loss %v → %v after 40 steps on one batch", cfg.Depth, first, last)
		}
		t.Logf("resnet%d %s: loss %.4f → %.4f", cfg.Depth, cfg.Stem, first, last)
		m.Forward(in, false)
		opt.Free()
		m.Free()
		freeAll(dev, in.X, in.Targets)
		if a := dev.Stats().Allocated; a != base {
			t.Errorf("resnet%d: %d bytes allocated after Free, baseline %d: %v", cfg.Depth, a, base, dev.Live())
		}
	}
}

// Per-block checkpointing gives the same loss and gradients to the bit with a lower activation
// peak, and leaves the running statistics where one forward moved them.
func TestResNet_checkpointSameGradsLessMemory(t *testing.T) {
	run := func(every int) (float32, []float32, []float32, int64) {
		dev := cpu.New()
		rng := rand.New(rand.NewSource(5))
		cfg := ResNetConfig{Depth: 18, Stem: "small", Width: 4, Classes: 5, InC: 1, InH: 16, InW: 16, Checkpoint: every}
		m, err := NewResNet(dev, cfg, 3)
		if err != nil {
			t.Fatal(err)
		}
		in := resnetInputs(dev, rng, 8, cfg)
		base := dev.Stats().Allocated
		dev.ResetPeak()
		loss, g := lossAndGrads(m, in, 1)
		return loss, g, tensor.ToHost(m.Buffers().Data), dev.Stats().Peak - base
	}
	refL, refG, refB, refPeak := run(0)
	for _, every := range []int{1, 3} {
		l, g, b, peak := run(every)
		if math.Float32bits(l) != math.Float32bits(refL) || !sameBits(g, refG) || !sameBits(b, refB) {
			t.Errorf("checkpoint every %d: loss %v vs %v, gradients or running stats differ", every, l, refL)
		}
		if peak >= refPeak {
			t.Errorf("checkpoint every %d: peak %s, not below %s", every, tensor.FormatBytes(peak), tensor.FormatBytes(refPeak))
		}
		t.Logf("checkpoint every %d: activation peak %s vs %s without", every, tensor.FormatBytes(peak), tensor.FormatBytes(refPeak))
	}
}

// A channels-last ResNet is the same network: on the CPU (whose NHWC is its NCHW arithmetic
// between transposes) a few SGD steps in NHWC end with the same parameters and buffers, bit for
// bit, as in NCHW — both stems, basic and bottleneck blocks, checkpointing, f32 and f16, and eval
// mode's loss. What it checks is the model's plumbing of the layout (every shape, the input's
// transpose at the stem, the pools and batch norms told the layout).
func TestResNet_channelsLastIsTheSameNetwork(t *testing.T) {
	for _, cfg := range []ResNetConfig{
		{Depth: 18, Stem: "small", Width: 4, Classes: 3, InC: 1, InH: 10, InW: 9},
		{Depth: 50, Stem: "imagenet", Width: 2, Classes: 3, InC: 3, InH: 32, InW: 30, Checkpoint: 1},
		{Depth: 18, Stem: "imagenet", Width: 2, Classes: 4, InC: 3, InH: 24, InW: 24, Compute: tensor.F16},
	} {
		run := func(l tensor.Layout) (params, bufs string, eval float32) {
			c := cfg
			c.Layout = l
			dev := cpu.New()
			m, opt := newResNetSGD(t, dev, c, 3)
			in := resnetInputs(dev, rand.New(rand.NewSource(5)), 6, c)
			for range 3 {
				m.Params().ZeroGrad()
				m.Forward(in, true)
				m.Backward(1)
				opt.Step(0.05)
			}
			eval = tensor.ToHost(m.Forward(in, false))[0]
			return m.Params().SHA256(), HashF32(tensor.ToHost(m.Buffers().Data)), eval
		}
		p0, b0, e0 := run(tensor.NCHW)
		p1, b1, e1 := run(tensor.NHWC)
		if p0 != p1 || b0 != b1 || math.Float32bits(e0) != math.Float32bits(e1) {
			t.Errorf("%+v: NHWC params %s buffers %s eval loss %v; NCHW %s %s %v", cfg, p1[:12], b1[:12], e1, p0[:12], b0[:12], e0)
		}
	}
}

// newResNetSGD builds a ResNet of cfg on dev with SGD (momentum 0.9) over its parameters; both are
// freed when the test ends.
func newResNetSGD(t *testing.T, dev tensor.Device, cfg ResNetConfig, seed uint64) (*ResNet, Optimizer) {
	t.Helper()
	m, err := NewResNet(dev, cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := NewSGD(m.Params(), SGDConfig{Momentum: 0.9})
	if err != nil {
		m.Free()
		t.Fatal(err)
	}
	t.Cleanup(func() { opt.Free(); m.Free() })
	return m, opt
}

// A training forward keeps what backward reads and not the shortcut's batch-norm output, which
// only the residual add reads (PyTorch's autograd frees it too): after the forward, no
// "….down.a" is live while the units' "….a" are. Nor the stem's output, the max pool's argmax
// or the stem's input copy (dropsStem: recomputed at the end of backward). Backward copies no
// block gradient for a branch that only reads it. The gradients are still those the gradient
// checks and the checkpointing test compare.
func TestResNet_keepsAndCopiesOnlyWhatBackwardNeeds(t *testing.T) {
	dev := cpu.New()
	cfg := ResNetConfig{Depth: 50, Stem: "imagenet", Width: 2, Classes: 3, InC: 3, InH: 32, InW: 32, Layout: tensor.NHWC}
	m, err := NewResNet(dev, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	in := resnetInputs(dev, rand.New(rand.NewSource(1)), 4, cfg)
	defer freeAll(dev, in.X, in.Targets)
	m.Forward(in, true)
	units, downs := 0, 0
	for _, b := range dev.Live() {
		switch {
		case strings.HasSuffix(b.Tag, ".down.a"):
			downs++
			t.Errorf("live after forward: %s %v", b.Tag, b.Shape)
		case b.Tag == "stem.a" || b.Tag == "stem.pool.arg" || strings.HasPrefix(b.Tag, "input"):
			t.Errorf("live after forward: %s %v (the stem's backward recomputes it)", b.Tag, b.Shape)
		case strings.HasSuffix(b.Tag, ".a"):
			units++
		}
	}
	if units == 0 {
		t.Fatalf("no unit outputs live after forward: tags changed? %v", dev.Live())
	}
	// Backward hands dout to the branches that only read it: no copy of a block's gradient
	// (….dsc for the shortcut, ….dmain for an identity's main branch), and units' da do occur.
	copies, das := 0, 0
	dev.SetObserver(func(e tensor.AllocEvent) {
		switch {
		case e.Free:
		case strings.HasSuffix(e.Tag, ".dsc") || strings.HasSuffix(e.Tag, ".dmain"):
			copies++
		case strings.HasSuffix(e.Tag, ".da"):
			das++
		}
	})
	m.Backward(1)
	dev.SetObserver(nil)
	if copies != 0 || das == 0 {
		t.Errorf("backward allocated %d gradient copies (want 0) and %d unit gradients (want > 0)", copies, das)
	}
	t.Logf("%d unit outputs live after forward, %d shortcut outputs; backward: %d unit gradients, %d copies", units, downs, das, copies)
}

// The blocks' add and ReLU through tensor.AddReLUDevice — forward in one pass, and in backward
// each block's input gradient taken through the previous block's ReLU by the pass that finishes
// it (that block then skips its own) — give the gradients and loss of the plain passes bit for
// bit: ResNet-50's bottleneck and projection blocks, with and without checkpointing, NCHW and
// NHWC (the CPU device's AddReLU is the two passes, so only the wiring differs).
func TestResNet_fusedAddReLUSameBits(t *testing.T) {
	for _, l := range []tensor.Layout{tensor.NCHW, tensor.NHWC} {
		for _, ck := range []int{0, 1} {
			cfg := ResNetConfig{Depth: 50, Stem: "imagenet", Width: 2, Classes: 3, InC: 3, InH: 32, InW: 32, Checkpoint: ck, Layout: l}
			run := func(fuse bool) ([]float32, float32) {
				o := resnetStepWith(t, cfg, 3, &resnetFuseAdd, fuse)
				return o.grad, o.loss
			}
			want, wl := run(false)
			got, gl := run(true)
			if math.Float32bits(gl) != math.Float32bits(wl) {
				t.Errorf("%s ckpt %d: loss %g fused, %g plain", l, ck, gl, wl)
			}
			nonzero := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s ckpt %d: grad[%d] %g fused, %g plain", l, ck, i, got[i], want[i])
				}
				if want[i] != 0 {
					nonzero++
				}
			}
			if nonzero < len(want)/2 {
				t.Fatalf("%s ckpt %d: only %d of %d gradients nonzero", l, ck, nonzero, len(want))
			}
		}
	}
}

// The stem's output, the max pool's argmax and the stem's input copy dropped after forward and
// recomputed at the end of backward (dropsStem; under checkpointing the stem's convolution output
// too) give the loss, every gradient and the running statistics of keeping them, bit for bit:
// NCHW and NHWC, f32 and f16 compute, with and without checkpointing.
func TestResNet_dropsStemSameBits(t *testing.T) {
	for _, l := range []tensor.Layout{tensor.NCHW, tensor.NHWC} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
			for _, ck := range []int{0, 1} {
				cfg := ResNetConfig{Depth: 50, Stem: "imagenet", Width: 2, Classes: 3, InC: 3, InH: 32, InW: 32, Checkpoint: ck, Layout: l, Compute: dt}
				kept := resnetStepWith(t, cfg, 5, &resnetDropStem, false)
				dropped := resnetStepWith(t, cfg, 5, &resnetDropStem, true)
				wg, wb, wl, wlive := kept.grad, kept.bufs, kept.loss, kept.live
				gg, gb, gl, glive := dropped.grad, dropped.bufs, dropped.loss, dropped.live
				if dropped.tags["stem.z"] != (ck == 0) || !kept.tags["stem.z"] {
					t.Errorf("%s %s ckpt %d: stem.z live after forward: %v dropped, %v kept (want dropped only under checkpointing)", l, dt, ck, dropped.tags["stem.z"], kept.tags["stem.z"])
				}
				name := fmt.Sprintf("%s %s ckpt %d", l, dt, ck)
				if math.Float32bits(gl) != math.Float32bits(wl) {
					t.Errorf("%s: loss %g dropped, %g kept", name, gl, wl)
				}
				for i := range wg {
					if math.Float32bits(gg[i]) != math.Float32bits(wg[i]) {
						t.Fatalf("%s: grad[%d] %g dropped, %g kept", name, i, gg[i], wg[i])
					}
				}
				for i := range wb {
					if math.Float32bits(gb[i]) != math.Float32bits(wb[i]) {
						t.Fatalf("%s: buffer[%d] %g dropped, %g kept (running statistics moved twice?)", name, i, gb[i], wb[i])
					}
				}
				if glive >= wlive {
					t.Errorf("%s: %d bytes live after forward dropped, %d kept", name, glive, wlive)
				}
			}
		}
	}
}

// resnetStep is one training step's results on the CPU device: the gradients, the buffers
// (running statistics), the loss and the bytes live after forward.
type resnetStep struct {
	grad, bufs []float32
	loss       float32
	live       int64
	tags       map[string]bool // live after forward
}

// resnetStepWith runs one training step of a fresh ResNet (seed for its weights and inputs, batch
// 4) with the switch *flag set to v for the step.
func resnetStepWith(t *testing.T, cfg ResNetConfig, seed int64, flag *bool, v bool) resnetStep {
	t.Helper()
	old := *flag
	*flag = v
	defer func() { *flag = old }()
	dev := cpu.New()
	m, err := NewResNet(dev, cfg, uint64(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	in := resnetInputs(dev, rand.New(rand.NewSource(seed)), 4, cfg)
	defer freeAll(dev, in.X, in.Targets)
	m.Params().ZeroGrad()
	o := resnetStep{tags: map[string]bool{}}
	o.loss = tensor.ToHost(m.Forward(in, true))[0]
	for _, b := range dev.Live() {
		o.live += b.Bytes
		o.tags[b.Tag] = true
	}
	m.Backward(1)
	o.grad, o.bufs = tensor.ToHost(m.Params().Grad), tensor.ToHost(m.Buffers().Data)
	return o
}
