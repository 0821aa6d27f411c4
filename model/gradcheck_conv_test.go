package model

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// Gradient checks of the convolutional layers (issue 21) on the CPU, in gradcheck_test.go's style,
// plus the device's forward against direct float64 references.

// convRef is a direct float64 convolution: x (N,C,H,W), w (OC,C,KH,KW), b (OC) or nil.
func convRef(x []float32, N, C, H, W int, w []float32, OC int, b []float32, g tensor.ConvGeom) []float64 {
	OH, OW := g.OutHW(H, W)
	y := make([]float64, N*OC*OH*OW)
	for n := 0; n < N; n++ {
		for oc := 0; oc < OC; oc++ {
			for oh := 0; oh < OH; oh++ {
				for ow := 0; ow < OW; ow++ {
					var s float64
					if b != nil {
						s = float64(b[oc])
					}
					for c := 0; c < C; c++ {
						for kh := 0; kh < g.KH; kh++ {
							for kw := 0; kw < g.KW; kw++ {
								ih, iw := oh*g.Stride-g.Pad+kh, ow*g.Stride-g.Pad+kw
								if ih < 0 || ih >= H || iw < 0 || iw >= W {
									continue
								}
								s += float64(x[((n*C+c)*H+ih)*W+iw]) * float64(w[((oc*C+c)*g.KH+kh)*g.KW+kw])
							}
						}
					}
					y[((n*OC+oc)*OH+oh)*OW+ow] = s
				}
			}
		}
	}
	return y
}

var convCases = []struct {
	N, C, H, W, OC, K, S, P int
	bias                    bool
}{
	{2, 3, 5, 5, 4, 3, 1, 1, true},
	{3, 2, 7, 6, 5, 3, 2, 1, false},
	{2, 4, 6, 6, 3, 1, 2, 0, true},
	{1, 2, 9, 9, 2, 7, 2, 3, false},
	{40, 3, 4, 4, 13, 3, 1, 1, true}, // several images per GEMM chunk
	{4, 8, 4, 4, 2, 1, 1, 0, false},
	{4, 2, 8, 8, 8, 1, 1, 0, false},
	{3, 2, 1, 1, 3, 3, 1, 1, false}, // a 1×1 plane under a 3×3 kernel
	{2, 2, 2, 3, 3, 5, 1, 2, true},  // a kernel wider than the plane
}

func TestConv2d_forwardMatchesReference(t *testing.T) {
	for i, tc := range convCases {
		rng := rand.New(rand.NewSource(int64(i + 1)))
		dev := cpu.New()
		ps := NewParams(dev)
		c := NewConv2d(ps, "c", tc.C, tc.OC, tc.K, tc.S, tc.P, tc.bias)
		ps.Build(tensor.F32)
		ps.Init(uint64(i + 1))
		x := randT(dev, rng, "x", 1, tc.N, tc.C, tc.H, tc.W)
		y := dev.Alloc(tensor.F32, "y", c.OutShape(x)...)
		var bh []float32
		if tc.bias {
			dev.RandNormal(c.B.W, 0.5, 3)
			bh = tensor.ToHost(c.B.W)
		}
		c.Forward(y, x)
		ref := convRef(tensor.ToHost(x), tc.N, tc.C, tc.H, tc.W, tensor.ToHost(c.W.W), tc.OC, bh, c.Geom)
		for j, v := range tensor.ToHost(y) {
			if math.Abs(float64(v)-ref[j]) > 1e-4*(1+math.Abs(ref[j])) {
				t.Fatalf("case %d: y[%d] = %v, reference %v", i, j, v, ref[j])
			}
		}
	}
}

func TestGradConv2d(t *testing.T) {
	for i, tc := range convCases {
		rng := rand.New(rand.NewSource(int64(i + 1)))
		dev := cpu.New()
		ps := NewParams(dev)
		c := NewConv2d(ps, "c", tc.C, tc.OC, tc.K, tc.S, tc.P, tc.bias)
		ps.Build(tensor.F32)
		ps.Init(uint64(i + 1))
		x := randT(dev, rng, "x", 1, tc.N, tc.C, tc.H, tc.W)
		shape := c.OutShape(x)
		r := randF64(rng, tensor.Numel(shape))
		loss := func() float64 {
			y := dev.Alloc(tensor.F32, "y", shape...)
			defer dev.Free(y)
			c.Forward(y, x)
			return dotHost(y, r)
		}
		dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), shape...)
		dx := dev.Alloc(tensor.F32, "dx", x.Shape()...)
		ps.ZeroGrad()
		c.Backward(dx, dy, x)
		name := fmt.Sprintf("conv%d.", i)
		checkGrad(t, name+"x", x, tensor.ToHost(dx), loss, rng, nil)
		checkGrad(t, name+"w", c.W.W, tensor.ToHost(c.W.G), loss, rng, nil)
		if tc.bias {
			checkGrad(t, name+"b", c.B.W, tensor.ToHost(c.B.G), loss, rng, nil)
		}
	}
}

func TestGradBatchNorm2d(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dev := cpu.New()
		ps, bufs := NewParams(dev), NewBuffers(dev)
		N, C, H, W := 2+rng.Intn(3), 1+rng.Intn(4), 1+rng.Intn(4), 2+rng.Intn(3)
		bn := NewBatchNorm2d(ps, bufs, "bn", C)
		ps.Build(tensor.F32)
		ps.Init(1)
		bufs.Build()
		dev.RandNormal(bn.W.W, 1, 5)
		dev.RandNormal(bn.B.W, 1, 6)
		x := randT(dev, rng, "x", 2, N, C, H, W)
		r := randF64(rng, x.Len())
		mean, rstd := dev.Alloc(tensor.F32, "mean", C), dev.Alloc(tensor.F32, "rstd", C)
		loss := func() float64 {
			y := dev.Alloc(tensor.F32, "y", x.Shape()...)
			defer dev.Free(y)
			bn.Forward(y, mean, rstd, x, false)
			return dotHost(y, r)
		}
		loss()
		dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), x.Shape()...)
		dx := dev.Alloc(tensor.F32, "dx", x.Shape()...)
		ps.ZeroGrad()
		bn.Backward(dx, dy, x, mean, rstd)
		name := fmt.Sprintf("bn%d.", seed)
		checkGrad(t, name+"x", x, tensor.ToHost(dx), loss, rng, nil)
		checkGrad(t, name+"w", bn.W.W, tensor.ToHost(bn.W.G), loss, rng, nil)
		checkGrad(t, name+"b", bn.B.W, tensor.ToHost(bn.B.G), loss, rng, nil)
	}
}

// Running statistics follow PyTorch: momentum 0.1, unbiased variance; eval mode uses them.
func TestBatchNorm2d_runningStatsAndEval(t *testing.T) {
	dev := cpu.New()
	ps, bufs := NewParams(dev), NewBuffers(dev)
	bn := NewBatchNorm2d(ps, bufs, "bn", 2)
	ps.Build(tensor.F32)
	ps.Init(1)
	bufs.Build()
	// channel 0: {1,2,3,4}, channel 1: {0,0,2,2}; N=2, H·W=2
	x := tensor.FromHost(dev, tensor.F32, "x", []float32{1, 2, 0, 0, 3, 4, 2, 2}, 2, 2, 1, 2)
	y := dev.Alloc(tensor.F32, "y", 2, 2, 1, 2)
	mean, rstd := dev.Alloc(tensor.F32, "mean", 2), dev.Alloc(tensor.F32, "rstd", 2)
	bn.Forward(y, mean, rstd, x, true)
	rm, rv := tensor.ToHost(bn.RunMean), tensor.ToHost(bn.RunVar)
	want := []float64{0.1 * 2.5, 0.1 * 1, 0.9 + 0.1*5.0/3, 0.9 + 0.1*4.0/3}
	for i, g := range []float32{rm[0], rm[1], rv[0], rv[1]} {
		if math.Abs(float64(g)-want[i]) > 1e-6 {
			t.Fatalf("running stats %v %v, want %v", rm, rv, want)
		}
	}
	bn.Eval(y, x)
	got := tensor.ToHost(y)
	w0 := (1 - 0.25) / math.Sqrt(float64(rv[0])+BatchNormEps)
	if math.Abs(float64(got[0])-w0) > 1e-5 {
		t.Fatalf("eval y[0] = %v, want %v", got[0], w0)
	}
}

func TestGradPooling(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	dev := cpu.New()
	N, C, H, W := 2, 3, 7, 6
	// distinct values 0.05 apart, so a ±0.01 perturbation never changes a window's maximum
	perm := rng.Perm(N * C * H * W)
	xv := make([]float32, len(perm))
	for i, p := range perm {
		xv[i] = 0.05 * float32(p-len(perm)/2)
	}
	x := tensor.FromHost(dev, tensor.F32, "x", xv, N, C, H, W)
	for _, g := range []tensor.ConvGeom{{KH: 3, KW: 3, Stride: 2, Pad: 1}, {KH: 2, KW: 2, Stride: 2}} {
		oh, ow := g.OutHW(H, W)
		r := randF64(rng, N*C*oh*ow)
		arg := dev.Alloc(tensor.I32, "arg", N, C, oh, ow)
		loss := func() float64 {
			y := dev.Alloc(tensor.F32, "y", N, C, oh, ow)
			defer dev.Free(y)
			MaxPool2dForward(dev, y, arg, x, g)
			return dotHost(y, r)
		}
		loss()
		dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), N, C, oh, ow)
		dx := dev.Alloc(tensor.F32, "dx", N, C, H, W)
		MaxPool2dBackward(dev, dx, dy, arg, g)
		checkGrad(t, fmt.Sprintf("maxpool%+v", g), x, tensor.ToHost(dx), loss, rng, nil)
	}
	r := randF64(rng, N*C)
	loss := func() float64 {
		y := dev.Alloc(tensor.F32, "y", N, C)
		defer dev.Free(y)
		GlobalAvgPoolForward(dev, tensor.NCHW, y, x)
		return dotHost(y, r)
	}
	dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), N, C)
	dx := dev.Alloc(tensor.F32, "dx", N, C, H, W)
	GlobalAvgPoolBackward(dev, tensor.NCHW, dx, dy)
	checkGrad(t, "avgpool", x, tensor.ToHost(dx), loss, rng, nil)
}

func resnetInputs(dev tensor.Device, rng *rand.Rand, B int, cfg ResNetConfig) Inputs {
	return mlpInputs(dev, rng, B, cfg.InC*cfg.InH*cfg.InW, cfg.Classes)
}

// The whole network: basic and bottleneck blocks, both stems, BN in training mode, the residual
// adds, checkpointed variants. ReLU's kinks make central differences of a deep net unreliable
// (with BN every weight moves a whole channel, so a channel with one pre-activation within h of
// 0 is off), so the wiring is checked with the identity in place of ReLU (≤ 2% of elements
// off: BN over two channels is badly conditioned; TestGradResidualBlock is strict), and with ReLU only loosely: ≤ 10% of elements off, at h = 1e-3.
// ReLU and max pooling themselves are checked strictly above and in gradcheck_test.go.
func TestGradResNet(t *testing.T) {
	cfgs := []ResNetConfig{
		{Depth: 18, Stem: "small", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8},
		{Depth: 18, Stem: "small", Width: 2, Classes: 3, InC: 1, InH: 8, InW: 8, Checkpoint: 2},
	}
	run := func(t *testing.T, i int, cfg ResNetConfig, strict bool) {
		rng := rand.New(rand.NewSource(int64(i + 1)))
		dev := cpu.New()
		m, err := NewResNet(dev, cfg, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		in := resnetInputs(dev, rng, 4, cfg)
		ps := m.Params()
		loss := func() float64 { return float64(tensor.ToHost(m.Forward(in, true))[0]) }
		ps.ZeroGrad()
		loss()
		m.Backward(1)
		grad := tensor.ToHost(ps.Grad)
		bad, n := 0, 0
		for _, q := range ps.List {
			name := fmt.Sprintf("resnet%d.%s", cfg.Depth, q.Name)
			g := grad[q.Offset : q.Offset+q.W.Len()]
			if strict {
				if !allTiny(g) {
					bad += checkGradH(t, name, q.W, g, loss, rng, nil, 1e-2, true)
					n += min(gradMaxN, q.W.Len())
				}
				continue
			}
			bad += checkGradH(t, name, q.W, g, loss, rng, nil, 1e-3, false)
			n += min(gradMaxN, q.W.Len())
		}
		if strict && bad*50 > n { // BN over few channels is badly conditioned: a 2% allowance
			t.Errorf("resnet%d %s: %d of %d checked elements off (more than 2%%)", cfg.Depth, cfg.Stem, bad, n)
		}
		if !strict {
			t.Logf("resnet%d %s: %d of %d checked elements off (ReLU kinks)", cfg.Depth, cfg.Stem, bad, n)
			if bad*10 > n {
				t.Errorf("resnet%d %s: %d of %d checked elements off (more than 10%%)", cfg.Depth, cfg.Stem, bad, n)
			}
		}
	}
	t.Run("identity", func(t *testing.T) {
		defer identityReLU()()
		for i, cfg := range cfgs[:2] {
			run(t, i, cfg, true)
		}
	})
	t.Run("relu", func(t *testing.T) {
		run(t, 0, cfgs[0], false)
	})
}

// identityReLU puts the identity in place of the ResNet's ReLU and returns the undo.
func identityReLU() func() {
	f, b, fuse := resnetReLU, resnetReLUBackward, resnetFuseReLU
	resnetFuseReLU = false
	resnetReLU = func(dev tensor.Device, y, x *tensor.Tensor) {
		if y != x {
			dev.Copy(y, x)
		}
	}
	resnetReLUBackward = func(dev tensor.Device, dx, dy, y *tensor.Tensor) {
		if dx != dy {
			dev.Copy(dx, dy)
		}
	}
	return func() { resnetReLU, resnetReLUBackward, resnetFuseReLU = f, b, fuse }
}

// allTiny: a gradient that is 0 in exact arithmetic (a BN shift followed by another BN, with
// the identity between them) leaves only f32 noise to compare.
func allTiny(g []float32) bool {
	for _, v := range g {
		if math.Abs(float64(v)) > 1e-5 {
			return false
		}
	}
	return true
}

// One residual block of each kind (basic, basic with a projection, bottleneck, bottleneck with a
// projection), strictly, with the identity in place of ReLU (see TestGradResNet).
func TestGradResidualBlock(t *testing.T) {
	defer identityReLU()()
	for _, kind := range []string{"basic", "basicdown", "bott", "bottdown"} {
		rng := rand.New(rand.NewSource(1))
		dev := cpu.New()
		ps, bufs := NewParams(dev), NewBuffers(dev)
		unit := func(name string, in, out, k, stride int, relu bool) *cbr {
			return &cbr{conv: NewConv2d(ps, name+".conv", in, out, k, stride, k/2, false),
				bn: NewBatchNorm2d(ps, bufs, name+".bn", out), relu: relu, name: name}
		}
		blk := &resBlock{name: "b"}
		C, O := 4, 4
		switch kind {
		case "basic":
			blk.units = []*cbr{unit("u0", C, O, 3, 1, true), unit("u1", O, O, 3, 1, false)}
		case "basicdown":
			O = 6
			blk.units = []*cbr{unit("u0", C, O, 3, 2, true), unit("u1", O, O, 3, 1, false)}
			blk.down = unit("down", C, O, 1, 2, false)
		case "bott":
			blk.units = []*cbr{unit("u0", C, 2, 1, 1, true), unit("u1", 2, 2, 3, 1, true), unit("u2", 2, O, 1, 1, false)}
		case "bottdown":
			O = 8
			blk.units = []*cbr{unit("u0", C, 2, 1, 1, true), unit("u1", 2, 2, 3, 2, true), unit("u2", 2, O, 1, 1, false)}
			blk.down = unit("down", C, O, 1, 2, false)
		}
		ps.Build(tensor.F32)
		ps.Init(3)
		bufs.Build()
		x := randT(dev, rng, "x", 1, 4, C, 6, 6)
		s := blk.forward(dev, x, tensor.F32, true, false)
		r := randF64(rng, s.out.Len())
		oshape := s.out.Shape()
		loss := func() float64 {
			s := blk.forward(dev, x, tensor.F32, true, false)
			return dotHost(s.out, r)
		}
		ps.ZeroGrad()
		d := tensor.FromHost(dev, tensor.F32, "d", f32of(r), oshape...)
		dx := dev.Alloc(tensor.F32, "dx", x.Shape()...)
		blk.backward(dev, dx, d, x, &s, false, false)
		g := tensor.ToHost(ps.Grad)
		for _, q := range ps.List {
			if gq := g[q.Offset : q.Offset+q.W.Len()]; !allTiny(gq) {
				checkGrad(t, kind+"."+q.Name, q.W, gq, loss, rng, nil)
			}
		}
		checkGrad(t, fmt.Sprint(kind, ".x"), x, tensor.ToHost(dx), loss, rng, nil)
	}
}
