package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// nhwcOf is the host transpose of an NCHW batch x (n,c,h,w) into NHWC, written independently of
// conv_layout.go's transposeImages.
func nhwcOf(x []float32, n, c, h, w int) []float32 {
	out := make([]float32, len(x))
	for in := 0; in < n; in++ {
		for ic := 0; ic < c; ic++ {
			for ih := 0; ih < h; ih++ {
				for iw := 0; iw < w; iw++ {
					out[((in*h+ih)*w+iw)*c+ic] = x[((in*c+ic)*h+ih)*w+iw]
				}
			}
		}
	}
	return out
}

func randVals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// sameBits fails unless got and want are equal bit for bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v (the NCHW path's)", what, i, got[i], want[i])
		}
	}
}

// TestConvLayouts_NHWCIsNCHWTransposed runs every tensor.ConvDevice and SyncBatchNormDevice
// operation in both layouts on the same data: the NHWC results, transposed, must be the NCHW
// results bit for bit (the CPU's NHWC is the NCHW arithmetic between transposes; what this
// checks is that every operand is moved to and from the right place), f32 and f16.
func TestConvLayouts_NHWCIsNCHWTransposed(t *testing.T) {
	dev := New()
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, g := range []tensor.ConvGeom{{KH: 3, KW: 3, Stride: 1, Pad: 1}, {KH: 1, KW: 1, Stride: 2}, {KH: 3, KW: 2, Stride: 2, Pad: 1}} {
			t.Run(fmt.Sprintf("%s/%dx%ds%dp%d", dt, g.KH, g.KW, g.Stride, g.Pad), func(t *testing.T) {
				checkLayouts(t, dev, dt, g)
			})
		}
	}
}

func checkLayouts(t *testing.T, dev *Device, dt tensor.DType, g tensor.ConvGeom) {
	rng := rand.New(rand.NewPCG(7, uint64(g.KH*10+g.Stride)))
	const N, C, H, W, OC = 3, 5, 7, 6, 4
	OH, OW := g.OutHW(H, W)
	xh, dyh := randVals(rng, N*C*H*W), randVals(rng, N*OC*OH*OW)
	wh, bh := randVals(rng, OC*C*g.KH*g.KW), randVals(rng, OC)
	gh, sh := randVals(rng, OC), randVals(rng, OC)
	img := func(l tensor.Layout, tag string, v []float32, n, c, h, w int) *tensor.Tensor {
		if l == tensor.NHWC {
			v = nhwcOf(v, n, c, h, w)
		}
		return tensor.FromHost(dev, dt, tag, v, l.Shape(n, c, h, w)...)
	}
	// back is an image output in NCHW order, whatever its layout.
	back := func(l tensor.Layout, y *tensor.Tensor) []float32 {
		v := tensor.ToHost(y)
		if l == tensor.NCHW {
			return v
		}
		_, c, h, w := l.Dims(y.Shape())
		out := make([]float32, len(v))
		for i := range out { // out[n][c][h][w] = v[n][h][w][c]
			in, r := i/(c*h*w), i%(c*h*w)
			ic, r := r/(h*w), r%(h*w)
			out[i] = v[(in*h*w+r)*c+ic]
		}
		return out
	}
	f32 := func(tag string, v []float32) *tensor.Tensor { return tensor.FromHost(dev, tensor.F32, tag, v, len(v)) }

	type result map[string][]float32
	run := func(l tensor.Layout) result {
		r := result{}
		gl := g
		gl.Layout = l
		x, dy := img(l, "x", xh, N, C, H, W), img(l, "dy", dyh, N, OC, OH, OW)
		w, b := tensor.FromHost(dev, dt, "w", wh, OC, C, g.KH, g.KW), tensor.FromHost(dev, dt, "b", bh, OC)
		y := dev.Alloc(dt, "y", l.Shape(N, OC, OH, OW)...)
		dev.Conv2d(y, x, w, b, gl)
		r["conv.y"] = back(l, y)
		dx, dw, db := dev.Alloc(dt, "dx", x.Shape()...), dev.Alloc(tensor.F32, "dw", OC, C, g.KH, g.KW), dev.Alloc(tensor.F32, "db", OC)
		dev.Fill(dw, 0)
		dev.Fill(db, 0)
		if dt == tensor.F32 {
			dev.Conv2dBackward(dx, dw, db, dy, x, w, gl)
			r["conv.dx"], r["conv.dw"], r["conv.db"] = back(l, dx), tensor.ToHost(dw), tensor.ToHost(db)
		}

		// Batch norm over y's OC channels.
		gain, shift := f32("gain", gh), f32("shift", sh)
		mean, rstd := dev.Alloc(tensor.F32, "mean", OC), dev.Alloc(tensor.F32, "rstd", OC)
		rm, rv := f32("rm", make([]float32, OC)), f32("rv", []float32{1, 1, 1, 1})
		bn := dev.Alloc(dt, "bn", y.Shape()...)
		dev.BatchNorm(l, bn, mean, rstd, rm, rv, y, gain, shift, 1e-5, 0.1)
		r["bn.y"], r["bn.mean"], r["bn.rstd"], r["bn.rm"], r["bn.rv"] = back(l, bn), tensor.ToHost(mean), tensor.ToHost(rstd), tensor.ToHost(rm), tensor.ToHost(rv)
		dev.BatchNormInference(l, bn, y, gain, shift, rm, rv, 1e-5)
		r["bn.eval"] = back(l, bn)
		dbn, dg, ds := dev.Alloc(dt, "dbn", y.Shape()...), f32("dg", make([]float32, OC)), f32("ds", make([]float32, OC))
		dev.BatchNormBackward(l, dbn, dg, ds, dy, y, gain, mean, rstd)
		r["bn.dx"], r["bn.dg"], r["bn.ds"] = back(l, dbn), tensor.ToHost(dg), tensor.ToHost(ds)
		vr := dev.Alloc(tensor.F32, "var", OC)
		dev.BatchNormStats(l, mean, vr, y)
		r["sbn.mean"], r["sbn.var"] = tensor.ToHost(mean), tensor.ToHost(vr)
		sdy, sdyx := dev.Alloc(tensor.F32, "sdy", OC), dev.Alloc(tensor.F32, "sdyx", OC)
		dev.BatchNormBackwardReduce(l, sdy, sdyx, nil, nil, dy, y, mean, rstd)
		r["sbn.sdy"], r["sbn.sdyx"] = tensor.ToHost(sdy), tensor.ToHost(sdyx)
		dev.BatchNormBackwardElemt(l, dbn, dy, y, gain, mean, rstd, sdy, sdyx, N*OH*OW)
		r["sbn.dx"] = back(l, dbn)

		// Pools over x.
		pg := tensor.ConvGeom{KH: 3, KW: 3, Stride: 2, Pad: 1, Layout: l}
		PH, PW := pg.OutHW(H, W)
		py, arg := dev.Alloc(dt, "py", l.Shape(N, C, PH, PW)...), dev.Alloc(tensor.I32, "arg", l.Shape(N, C, PH, PW)...)
		dev.MaxPool2d(py, arg, x, pg)
		args := make([]int32, arg.Len())
		dev.DownloadI32(args, arg)
		argf := make([]float32, len(args)) // exact: indices are small
		for i, a := range args {
			argf[i] = float32(a)
		}
		r["pool.y"] = back(l, py)
		r["pool.arg"] = back(l, tensor.FromHost(dev, tensor.F32, "argf", argf, arg.Shape()...))
		pdx := dev.Alloc(dt, "pdx", x.Shape()...)
		dev.MaxPool2dBackward(pdx, py, arg, pg) // py as the incoming gradient
		r["pool.dx"] = back(l, pdx)
		gy := dev.Alloc(dt, "gy", N, C)
		dev.GlobalAvgPool(l, gy, x)
		r["gap.y"] = tensor.ToHost(gy)
		gdx := dev.Alloc(dt, "gdx", x.Shape()...)
		dev.GlobalAvgPoolBackward(l, gdx, gy)
		r["gap.dx"] = back(l, gdx)
		return r
	}
	want := run(tensor.NCHW)
	got := run(tensor.NHWC)
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for k, w := range want {
		sameBits(t, k, got[k], w)
	}
}
