package model

import (
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// BenchmarkConv2d3x3 is one typical 3×3 layer of the MNIST ResNet (configs/mnist-resnet.yaml):
// batch 128, 24 → 24 channels at 14×14, forward + backward (data and filter): 3 GEMMs' worth
// of 2·N·OC·C·9·OH·OW flops each; b.ReportMetric gives GFLOP/s.
func BenchmarkConv2d3x3(b *testing.B) {
	for _, sz := range []struct{ N, C, H int }{{128, 12, 28}, {128, 24, 14}, {128, 48, 7}, {32, 64, 56}} {
		b.Run(fmt3(sz.N, sz.C, sz.H), func(b *testing.B) {
			dev := cpu.New()
			rng := rand.New(rand.NewSource(1))
			ps := NewParams(dev)
			c := NewConv2d(ps, "c", sz.C, sz.C, 3, 1, 1, false)
			ps.Build(tensor.F32)
			ps.Init(1)
			x := randT(dev, rng, "x", 1, sz.N, sz.C, sz.H, sz.H)
			y := dev.Alloc(tensor.F32, "y", c.OutShape(x)...)
			dx := dev.Alloc(tensor.F32, "dx", x.Shape()...)
			flops := 2.0 * float64(sz.N*sz.C*sz.C*9*sz.H*sz.H)
			b.Run("fwd", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					c.Forward(y, x)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run("bwd", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					c.Backward(dx, y, x)
				}
				b.ReportMetric(2*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}

func fmt3(n, c, h int) string {
	return "N" + itoa(n) + "_C" + itoa(c) + "_" + itoa(h) + "x" + itoa(h)
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	s := ""
	for ; v > 0; v /= 10 {
		s = string(rune('0'+v%10)) + s
	}
	return s
}

// BenchmarkResNetMNIST is one training step (forward + backward) of configs/mnist-resnet.yaml's
// model at micro-batch 128.
func BenchmarkResNetMNIST(b *testing.B) {
	dev := cpu.New()
	rng := rand.New(rand.NewSource(1))
	cfg := ResNetConfig{Depth: 18, Stem: "small", Width: 12, Classes: 10, InC: 1, InH: 28, InW: 28}
	m, err := NewResNet(dev, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	in := resnetInputs(dev, rng, 128, cfg)
	in.Valid = 128
	for i := 0; i < b.N; i++ {
		m.Forward(in, true)
		m.Backward(1)
	}
	b.ReportMetric(128*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkConv2dDirect is the alternative to im2col measured against it: a direct convolution
// in plain Go (one thread, the inner loop a contiguous row update y[oh,:] += w·x[ih, shifted]),
// forward only, on BenchmarkConv2d3x3's 24-channel 14×14 layer at batch 128, with all the threads
// used through one goroutine per image block. Compare its GFLOP/s with Conv2d3x3's fwd.
func BenchmarkConv2dDirect(b *testing.B) {
	N, C, H := 128, 24, 14
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, N*C*H*H)
	w := make([]float32, C*C*9)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, N*C*H*H)
	direct := func(n0, n1 int) {
		for n := n0; n < n1; n++ {
			for oc := 0; oc < C; oc++ {
				out := y[(n*C+oc)*H*H : (n*C+oc+1)*H*H]
				clear(out)
				for c := 0; c < C; c++ {
					plane := x[(n*C+c)*H*H : (n*C+c+1)*H*H]
					for kh := 0; kh < 3; kh++ {
						for kw := 0; kw < 3; kw++ {
							wv := w[((oc*C+c)*3+kh)*3+kw]
							lo, hi := max(0, 1-kw), min(H, H+1-kw)
							for oh := 0; oh < H; oh++ {
								ih := oh - 1 + kh
								if ih < 0 || ih >= H {
									continue
								}
								dst := out[oh*H+lo : oh*H+hi]
								src := plane[ih*H+lo-1+kw : ih*H+hi-1+kw]
								src = src[:len(dst)]
								for i, v := range src {
									dst[i] += wv * v
								}
							}
						}
					}
				}
			}
		}
	}
	flops := 2.0 * float64(N*C*C*9*H*H)
	for i := 0; i < b.N; i++ {
		done := make(chan struct{})
		go func() { direct(0, N/2); close(done) }()
		direct(N/2, N)
		<-done
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
