package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// The CPU device computes in f32 and stores bf16 wherever it stores f16. Each operation below runs
// twice on the same inputs (values a bf16 tensor holds): with f32 tensors, and with the tensors
// precision bf16 makes bf16 (activations and the weight copy; statistics, losses and the optimizer
// state stay f32). Every bf16 result must be the f32 result to within one bf16 rounding (2^-8
// relative, elementwise, with an absolute floor for values near zero); f16 runs the same table as
// a control.
func TestCPU_halfOpsMatchF32(t *testing.T) {
	dev := New()
	const R, C = 37, 70 // rows, columns: several parallel chunks, odd sizes
	r := rand.New(rand.NewPCG(32, 1))
	type op struct {
		name string
		// run computes into outputs it allocates from inputs of dtype dt; it returns them.
		run func(dt tensor.DType, in [][]float32) []*tensor.Tensor
		ins []int // input lengths
	}
	mk := func(dt tensor.DType, v []float32, shape ...int) *tensor.Tensor {
		return tensor.FromHost(dev, dt, "in", v, shape...)
	}
	ops := []op{
		{"Add", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			o := dev.Alloc(dt, "o", R, C)
			dev.Add(o, mk(dt, in[0], R, C), mk(dt, in[1], R, C))
			return []*tensor.Tensor{o}
		}, []int{R * C, R * C}},
		{"Axpy+Scale", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			y := mk(dt, in[0], R, C)
			dev.Axpy(y, 0.375, mk(dt, in[1], R, C))
			dev.Scale(y, -1.5)
			return []*tensor.Tensor{y}
		}, []int{R * C, R * C}},
		{"AddBias+BiasGrad", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			y := mk(dt, in[0], R, C)
			dev.AddBias(y, mk(dt, in[1], C))
			db := mk(tensor.F32, make([]float32, C), C)
			dev.BiasGrad(db, y)
			return []*tensor.Tensor{y, db}
		}, []int{R * C, C}},
		{"GELU+backward", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			x := mk(dt, in[0], R, C)
			y, dx := dev.Alloc(dt, "y", R, C), dev.Alloc(dt, "dx", R, C)
			dev.GELU(y, x)
			dev.GELUBackward(dx, mk(dt, in[1], R, C), x)
			return []*tensor.Tensor{y, dx}
		}, []int{R * C, R * C}},
		{"ReLU+backward", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			y, dx := dev.Alloc(dt, "y", R, C), dev.Alloc(dt, "dx", R, C)
			dev.ReLU(y, mk(dt, in[0], R, C))
			dev.ReLUBackward(dx, mk(dt, in[1], R, C), y)
			return []*tensor.Tensor{y, dx}
		}, []int{R * C, R * C}},
		{"LayerNorm+backward", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			x, w, b := mk(dt, in[0], R, C), mk(dt, in[1], C), mk(dt, in[2], C)
			y := dev.Alloc(dt, "y", R, C)
			mean, rstd := dev.Alloc(tensor.F32, "mean", R), dev.Alloc(tensor.F32, "rstd", R)
			dev.LayerNorm(y, mean, rstd, x, w, b, 1e-5)
			dx := dev.Alloc(dt, "dx", R, C)
			dw, db := mk(tensor.F32, make([]float32, C), C), mk(tensor.F32, make([]float32, C), C)
			dev.LayerNormBackward(dx, dw, db, mk(dt, in[3], R, C), x, w, mean, rstd)
			return []*tensor.Tensor{y, mean, rstd, dx, dw, db}
		}, []int{R * C, C, C, R * C}},
		{"Softmax+backward", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			y, dx := dev.Alloc(dt, "y", 2, C, C), dev.Alloc(dt, "dx", 2, C, C)
			dev.Softmax(y, mk(dt, in[0], 2, C, C), 0.5, true)
			dev.SoftmaxBackward(dx, mk(dt, in[1], 2, C, C), y, 0.5)
			return []*tensor.Tensor{y, dx}
		}, []int{2 * C * C, 2 * C * C}},
		{"CrossEntropy+backward", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			logits := mk(dt, in[0], R, C)
			tg := dev.Alloc(tensor.I32, "targets", R)
			ids := make([]int32, R)
			for i := range ids {
				ids[i] = int32(i * 7 % C)
			}
			dev.UploadI32(tg, ids)
			losses, dl := dev.Alloc(tensor.F32, "losses", R), dev.Alloc(dt, "dlogits", R, C)
			dev.CrossEntropy(losses, logits, tg)
			dev.CrossEntropyBackward(dl, logits, tg, 1.0/R)
			return []*tensor.Tensor{losses, dl}
		}, []int{R * C}},
		{"MatMul+BatchedMatMul", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			c, bc := dev.Alloc(dt, "c", R, C), dev.Alloc(dt, "bc", 2, R, R)
			dev.MatMul(c, mk(dt, in[0], R, C), mk(dt, in[1], C, C), false, true, 1, 0)
			a := mk(dt, in[0], 2, R, C/2)
			dev.BatchedMatMul(bc, a, a, false, true, 0.5, 0)
			return []*tensor.Tensor{c, bc}
		}, []int{R * C, C * C}},
		{"Copy+Fill", func(dt tensor.DType, in [][]float32) []*tensor.Tensor {
			h, back, f := dev.Alloc(dt, "h", R, C), dev.Alloc(tensor.F32, "back", R, C), dev.Alloc(dt, "f", 3)
			dev.Copy(h, mk(tensor.F32, in[0], R, C)) // rounds to dt
			dev.Copy(back, h)
			dev.Fill(f, 0.1)
			return []*tensor.Tensor{h, back, f}
		}, []int{R * C}},
	}
	for _, h := range []tensor.DType{tensor.F16, tensor.BF16} {
		ulp := 0x1p-10 // f16: 11 significant bits
		if h == tensor.BF16 {
			ulp = 0x1p-7 // bf16: 8 significant bits
		}
		for _, o := range ops {
			in := make([][]float32, len(o.ins))
			for i, n := range o.ins {
				in[i] = randVec(r, n)
				formatOf(h).Round(in[i]) // the values both runs hold exactly
			}
			want, got := o.run(tensor.F32, in), o.run(h, in)
			for k := range want {
				w, g := tensor.ToHost(want[k]), tensor.ToHost(got[k])
				if got[k].DType() != want[k].DType() && got[k].DType() != h {
					t.Fatalf("%s %s: output %d is %s", h, o.name, k, got[k].DType())
				}
				var scale float64
				for _, v := range w {
					scale = max(scale, math.Abs(float64(v)))
				}
				for i := range w {
					// Results stored in h are rounded once more than the f32 ones; inputs
					// rounded to h feed f32 arithmetic in both runs. A few ulps of the
					// largest value: reductions sum values of mixed sign.
					tol := 2*ulp*math.Abs(float64(w[i])) + 4*ulp*scale*0x1p-4
					if d := math.Abs(float64(g[i]) - float64(w[i])); !(d <= tol) {
						t.Fatalf("%s %s: output %d [%d] = %g, f32 %g (tolerance %g)", h, o.name, k, i, g[i], w[i], tol)
					}
				}
			}
		}
	}
}

// A bf16 tensor uploads, downloads and converts with round to nearest even, as the half package.
func TestCPU_bf16Storage(t *testing.T) {
	dev := New()
	vals := []float32{1, 1.00390625, 1.01171875, -3.0e38, float32(math.Inf(-1)), 0x1p-130, 3.4e38}
	x := tensor.FromHost(dev, tensor.BF16, "x", vals, len(vals))
	if x.Bytes() != int64(2*len(vals)) {
		t.Errorf("bf16 tensor of %d holds %d bytes", len(vals), x.Bytes())
	}
	got := tensor.ToHost(x)
	for i, v := range vals {
		if want := half.BF16ToFloat32(half.BF16FromFloat32(v)); math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Errorf("bf16 store of %g reads %g, want %g", v, got[i], want)
		}
	}
}
