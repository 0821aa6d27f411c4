package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/goddp/goddp/model/tensor"
)

// withKernel runs f with each micro-kernel this CPU has (AVX-512, AVX2, Go) installed; with the
// Go kernel the packing's transposes are the Go ones too (what a machine without AVX runs).
func withKernel(t *testing.T, f func(t *testing.T)) {
	savedK, savedT := gemmKern, transpose8
	defer func() { gemmKern, transpose8 = savedK, savedT }()
	for _, k := range gemmKernels {
		gemmKern, transpose8 = k.fn, savedT
		if k.name == "go" {
			transpose8 = transpose8Go
		}
		t.Run(k.name, f)
	}
}

// checkGemm runs one MatMul of random operands against the float64 reference.
func checkGemm(t *testing.T, dev *Device, r *rand.Rand, m, n, k int, ta, tb bool, adt, bdt, cdt tensor.DType, alpha, beta float32, nanC bool) {
	t.Helper()
	a, b, c := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
	roundTo(adt, a)
	roundTo(bdt, b)
	roundTo(cdt, c)
	if nanC {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	ashape, bshape := []int{m, k}, []int{k, n}
	if ta {
		ashape = []int{k, m}
	}
	if tb {
		bshape = []int{n, k}
	}
	A, B := tensor.FromHost(dev, adt, "a", a, ashape...), tensor.FromHost(dev, bdt, "b", b, bshape...)
	C := tensor.FromHost(dev, cdt, "c", c, m, n)
	defer func() { dev.Free(A); dev.Free(B); dev.Free(C) }()
	dev.MatMul(C, A, B, ta, tb, alpha, beta)
	cref := c
	if nanC {
		cref = make([]float32, m*n) // beta is 0: C's old contents must not matter
	}
	want := naiveMatMul(a, b, cref, m, n, k, ta, tb, float64(alpha), float64(beta))
	got := tensor.ToHost(C)
	tol := 2e-5 * math.Sqrt(float64(k)+1)
	switch cdt {
	case tensor.F16:
		tol = 2e-3 // 11 significant bits
	case tensor.BF16:
		tol = 1e-2 // 8 significant bits: one rounding is ≤ 2^-9 relative
	}
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Fatalf("m=%d n=%d k=%d ta=%v tb=%v %s·%s→%s alpha=%g beta=%g: C[%d] = %g", m, n, k, ta, tb, adt, bdt, cdt, alpha, beta, i, g)
		}
	}
	if e := relErr(got, want); e > tol {
		t.Fatalf("m=%d n=%d k=%d ta=%v tb=%v %s·%s→%s alpha=%g beta=%g: rel err %g > %g", m, n, k, ta, tb, adt, bdt, cdt, alpha, beta, e, tol)
	}
}

func TestGemm_shapesTransposesAlphaBeta(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		dev := New()
		r := rand.New(rand.NewPCG(7, 8))
		shapes := [][3]int{
			{1, 1, 1}, {1, 7, 3}, {7, 1, 3}, {2, 3, 1}, {12, 32, 1}, {12, 32, 5}, {13, 33, 4},
			{11, 31, 17}, {24, 64, 256}, {25, 65, 257}, {36, 96, 300}, {145, 70, 9},
			{150, 40, 513}, {5, 300, 40}, {128, 10, 64}, {3, 2100, 7},
		}
		for _, sh := range shapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, tensor.F32, tensor.F32, tensor.F32, 1, 0, false)
					checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, tensor.F32, tensor.F32, tensor.F32, -0.75, 1, false)
					checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, tensor.F32, tensor.F32, tensor.F32, 1.5, -0.5, false)
					checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, tensor.F32, tensor.F32, tensor.F32, 2, 0, true)
				}
			}
		}
	})
}

// roundTo rounds v to what a tensor of dtype dt holds (f16 or bf16; f32 as it is).
func roundTo(dt tensor.DType, v []float32) {
	if dt.Half() {
		formatOf(dt).Round(v)
	}
}

// f16 and bf16 operands (widened while packing) and results (rounded from the f32 scratch).
func TestGemm_halfOperands(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		dev := New()
		r := rand.New(rand.NewPCG(9, 10))
		for _, h := range []tensor.DType{tensor.F16, tensor.BF16} {
			for _, sh := range [][3]int{{1, 1, 1}, {13, 45, 19}, {40, 70, 300}} {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, h, h, tensor.F32, 1, 0, true)
						checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, h, tensor.F32, tensor.F32, 0.5, 1, false)
						checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, tensor.F32, h, h, 1, 0.5, false)
						checkGemm(t, dev, r, sh[0], sh[1], sh[2], ta, tb, h, h, h, 1, 0, true)
					}
				}
			}
		}
	})
}

func TestGemm_zeroK(t *testing.T) {
	dev := New()
	C := tensor.FromHost(dev, tensor.F32, "c", []float32{1, 2, 3, 4, 5, 6}, 2, 3)
	A, B := dev.Alloc(tensor.F32, "a", 2, 0), dev.Alloc(tensor.F32, "b", 0, 3)
	dev.MatMul(C, A, B, false, false, 1, 2)
	for i, v := range tensor.ToHost(C) {
		if v != 2*float32(i+1) {
			t.Fatalf("k=0, beta=2: C[%d] = %g", i, v)
		}
	}
	dev.Fill(C, float32(math.NaN()))
	dev.MatMul(C, A, B, false, false, 1, 0)
	for i, v := range tensor.ToHost(C) {
		if v != 0 {
			t.Fatalf("k=0, beta=0: C[%d] = %g", i, v)
		}
	}
}

// Operands and output may be views at an offset inside larger tensors, and 3-D (rows = B·T).
func TestGemm_views(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(17, 18))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		const m, n, k = 2 * 13, 37, 45
		a, b := randVec(r, 7+m*k+3), randVec(r, 5+n*k)
		roundTo(dt, a)
		roundTo(dt, b)
		Abig, Bbig := tensor.FromHost(dev, dt, "a", a, len(a)), tensor.FromHost(dev, dt, "b", b, len(b))
		Cbig := dev.Alloc(tensor.F32, "c", 11+m*n)
		dev.Fill(Cbig, float32(math.NaN()))
		A, B, C := Abig.View(7, 2, 13, k), Bbig.View(5, n, k), Cbig.View(11, 2, 13, n)
		dev.MatMul(C, A, B, false, true, 1, 0)
		want := naiveMatMul(a[7:7+m*k], b[5:], make([]float32, m*n), m, n, k, false, true, 1, 0)
		if e := relErr(tensor.ToHost(C), want); e > 1e-5 {
			t.Fatalf("%s views: rel err %g", dt, e)
		}
		if got := tensor.ToHost(Cbig)[:11]; !math.IsNaN(float64(got[10])) {
			t.Fatalf("%s views: wrote before the view: %v", dt, got)
		}
	}
}

// The MLP step's shapes at full size, with the threads splitting them.
func TestGemm_mlpShapes(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(11, 12))
	checkGemm(t, dev, r, 128, 1024, 784, false, true, tensor.F32, tensor.F32, tensor.F32, 1, 0, true)  // forward
	checkGemm(t, dev, r, 1024, 784, 128, true, false, tensor.F32, tensor.F32, tensor.F32, 1, 1, false) // weight grad
	checkGemm(t, dev, r, 128, 784, 1024, false, false, tensor.F32, tensor.F32, tensor.F32, 1, 0, true) // input grad
}

func TestGemm_batchedSmall(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		dev := New()
		r := rand.New(rand.NewPCG(13, 14))
		for _, sh := range [][4]int{{64, 64, 64, 32}, {3, 17, 9, 5}, {1, 40, 30, 20}, {5, 1, 1, 1}} {
			nb, m, n, k := sh[0], sh[1], sh[2], sh[3]
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					a, b := randVec(r, nb*m*k), randVec(r, nb*k*n)
					c := randVec(r, nb*m*n)
					ashape, bshape := []int{nb, m, k}, []int{nb, k, n}
					if ta {
						ashape = []int{nb, k, m}
					}
					if tb {
						bshape = []int{nb, n, k}
					}
					A, B := tensor.FromHost(dev, tensor.F32, "a", a, ashape...), tensor.FromHost(dev, tensor.F32, "b", b, bshape...)
					C := tensor.FromHost(dev, tensor.F32, "c", c, nb, m, n)
					dev.BatchedMatMul(C, A, B, ta, tb, 0.5, 1)
					got := tensor.ToHost(C)
					for i := 0; i < nb; i++ {
						want := naiveMatMul(a[i*m*k:(i+1)*m*k], b[i*k*n:(i+1)*k*n], c[i*m*n:(i+1)*m*n], m, n, k, ta, tb, 0.5, 1)
						if e := relErr(got[i*m*n:(i+1)*m*n], want); e > 1e-5 {
							t.Fatalf("batched %v ta=%v tb=%v batch %d: rel err %g", sh, ta, tb, i, e)
						}
					}
					dev.Free(A)
					dev.Free(B)
					dev.Free(C)
				}
			}
		}
	})
}

func TestCPU_biasGrad(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(15, 16))
	for _, sh := range [][2]int{{1, 1}, {3, 70}, {128, 1024}, {128, 10}, {7, 1500}} {
		rows, cols := sh[0], sh[1]
		dy, db0 := randVec(r, rows*cols), randVec(r, cols)
		DY, DB := tensor.FromHost(dev, tensor.F32, "dy", dy, rows, cols), tensor.FromHost(dev, tensor.F32, "db", db0, cols)
		dev.BiasGrad(DB, DY)
		want := make([]float64, cols)
		for j := range want {
			want[j] = float64(db0[j])
			for i := 0; i < rows; i++ {
				want[j] += float64(dy[i*cols+j])
			}
		}
		if e := relErr(tensor.ToHost(DB), want); e > 1e-6 {
			t.Fatalf("BiasGrad %v: rel err %g", sh, e)
		}
	}
}

// BenchmarkGemm reports GFLOP/s for the shapes of the MLP step (and a square one) with the
// selected micro-kernel: go test -run xxx -bench Gemm ./model/
func BenchmarkGemm(b *testing.B) {
	for _, bc := range []struct {
		name    string
		m, n, k int
		ta, tb  bool
	}{
		{"fwd_128x1024x1024_NT", 128, 1024, 1024, false, true},
		{"fwd_128x1024x784_NT", 128, 1024, 784, false, true},
		{"dx_128x784x1024_NN", 128, 784, 1024, false, false},
		{"dw_1024x1024x128_TN", 1024, 1024, 128, true, false},
		{"dw_1024x784x128_TN", 1024, 784, 128, true, false},
		{"sq_1024_NN", 1024, 1024, 1024, false, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dev := New()
			r := rand.New(rand.NewPCG(1, 2))
			ashape, bshape := []int{bc.m, bc.k}, []int{bc.k, bc.n}
			if bc.ta {
				ashape = []int{bc.k, bc.m}
			}
			if bc.tb {
				bshape = []int{bc.n, bc.k}
			}
			A := tensor.FromHost(dev, tensor.F32, "a", randVec(r, bc.m*bc.k), ashape...)
			B := tensor.FromHost(dev, tensor.F32, "b", randVec(r, bc.k*bc.n), bshape...)
			C := dev.Alloc(tensor.F32, "c", bc.m, bc.n)
			for b.Loop() {
				dev.MatMul(C, A, B, bc.ta, bc.tb, 1, 0)
			}
			b.ReportMetric(2*float64(bc.m*bc.n*bc.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkGemmBatchedAttention(b *testing.B) {
	dev := New()
	r := rand.New(rand.NewPCG(1, 2))
	const nb, t, hs = 64, 64, 32
	Q := tensor.FromHost(dev, tensor.F32, "q", randVec(r, nb*t*hs), nb, t, hs)
	K := tensor.FromHost(dev, tensor.F32, "k", randVec(r, nb*t*hs), nb, t, hs)
	S := dev.Alloc(tensor.F32, "s", nb, t, t)
	for b.Loop() {
		dev.BatchedMatMul(S, Q, K, false, true, 1, 0)
	}
	b.ReportMetric(2*float64(nb*t*t*hs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// mlpBench is the MLP 784-1024-1024-10 at batch 128 in FP32, written straight onto device ops:
// forward (MatMul with W stored out×in, AddBias, ReLU), softmax cross-entropy, backward
// (CrossEntropyBackward, weight/bias/input gradients, ReLUBackward) and a plain SGD update.
type mlpBench struct {
	dev             *Device
	batch           int
	widths          []int
	w, b, dw, db    []*tensor.Tensor
	acts, pre       []*tensor.Tensor // acts[0] is the input, acts[i+1] layer i's output (after ReLU)
	dacts           []*tensor.Tensor
	targets, losses *tensor.Tensor
	lossSum         *tensor.Tensor
}

func newMLPBench(dev *Device, batch int, widths []int) *mlpBench {
	r := rand.New(rand.NewPCG(5, 6))
	m := &mlpBench{dev: dev, batch: batch, widths: widths}
	L := len(widths) - 1
	m.acts = append(m.acts, tensor.FromHost(dev, tensor.F32, "x", randVec(r, batch*widths[0]), batch, widths[0]))
	for i := 0; i < L; i++ {
		in, out := widths[i], widths[i+1]
		m.w = append(m.w, dev.Alloc(tensor.F32, fmt.Sprintf("w%d", i), out, in))
		dev.RandNormal(m.w[i], float32(math.Sqrt(2/float64(in))), uint64(i+1))
		m.b = append(m.b, dev.Alloc(tensor.F32, fmt.Sprintf("b%d", i), out))
		dev.Fill(m.b[i], 0)
		m.dw = append(m.dw, dev.Alloc(tensor.F32, fmt.Sprintf("dw%d", i), out, in))
		m.db = append(m.db, dev.Alloc(tensor.F32, fmt.Sprintf("db%d", i), out))
		m.pre = append(m.pre, dev.Alloc(tensor.F32, fmt.Sprintf("h%d", i), batch, out))
		m.acts = append(m.acts, m.pre[i]) // ReLU in place: the saved output is all backward needs
		m.dacts = append(m.dacts, dev.Alloc(tensor.F32, fmt.Sprintf("dh%d", i), batch, out))
	}
	ts := make([]int32, batch)
	for i := range ts {
		ts[i] = int32(r.IntN(widths[L]))
	}
	m.targets = dev.Alloc(tensor.I32, "targets", batch)
	dev.UploadI32(m.targets, ts)
	m.losses = dev.Alloc(tensor.F32, "losses", batch)
	m.lossSum = dev.Alloc(tensor.F32, "loss", 1)
	return m
}

// step runs one training step and returns the mean loss.
func (m *mlpBench) step(lr float32) float32 {
	d := m.dev
	L := len(m.w)
	for i := 0; i < L; i++ {
		d.MatMul(m.pre[i], m.acts[i], m.w[i], false, true, 1, 0)
		d.AddBias(m.pre[i], m.b[i])
		if i < L-1 {
			d.ReLU(m.pre[i], m.pre[i])
		}
	}
	logits := m.pre[L-1]
	d.CrossEntropy(m.losses, logits, m.targets)
	d.Fill(m.lossSum, 0)
	d.Sum(m.lossSum, m.losses)
	scale := 1 / float32(m.batch)
	d.CrossEntropyBackward(m.dacts[L-1], logits, m.targets, scale)
	for i := L - 1; i >= 0; i-- {
		dy := m.dacts[i]
		// Gradients accumulate: start from zero as a trainer does at micro-step 0 (beta=0 does it
		// for dW; db accumulates).
		d.MatMul(m.dw[i], dy, m.acts[i], true, false, 1, 0)
		d.Fill(m.db[i], 0)
		d.BiasGrad(m.db[i], dy)
		if i > 0 {
			d.MatMul(m.dacts[i-1], dy, m.w[i], false, false, 1, 0)
			d.ReLUBackward(m.dacts[i-1], m.dacts[i-1], m.acts[i])
		}
	}
	for i := 0; i < L; i++ {
		d.SGD(m.w[i], m.dw[i], nil, nil, tensor.SGDArgs{LR: lr})
		d.SGD(m.b[i], m.db[i], nil, nil, tensor.SGDArgs{LR: lr})
	}
	var loss [1]float32
	d.Download(loss[:], m.lossSum)
	return loss[0] * scale
}

// mlpStepFLOPs counts the step's matrix-product FLOPs (forward, dW, dX of all but the first layer).
func mlpStepFLOPs(batch int, widths []int) float64 {
	var f float64
	for i := 0; i+1 < len(widths); i++ {
		mk := 2 * float64(batch) * float64(widths[i]) * float64(widths[i+1])
		f += 2 * mk
		if i > 0 {
			f += mk
		}
	}
	return f
}

func TestMLPStep_learns(t *testing.T) {
	m := newMLPBench(New(), 32, []int{20, 64, 64, 5})
	first := m.step(0.1)
	var last float32
	for i := 0; i < 60; i++ {
		last = m.step(0.1)
	}
	if !(last < first/4) {
		t.Fatalf("loss went from %g to %g over 60 steps on one fixed batch", first, last)
	}
}

// BenchmarkMLPStep: one FP32 training step of an MLP 784-1024-1024-10 at batch 128 (the
// comparison with PyTorch is scripts/bench-mlp-step.sh). ms/step is the median step.
func BenchmarkMLPStep(b *testing.B) {
	widths := []int{784, 1024, 1024, 10}
	m := newMLPBench(New(), 128, widths)
	for range 3 {
		m.step(1e-3)
	}
	var times []float64
	for b.Loop() {
		t0 := time.Now()
		m.step(1e-3)
		times = append(times, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	sort.Float64s(times)
	med := times[len(times)/2]
	b.ReportMetric(med, "ms/step")
	b.ReportMetric(mlpStepFLOPs(128, widths)/med/1e6, "GFLOP/s")
}

// BenchmarkGemmKernel times the micro-kernel alone on panels that stay in cache (one thread): the
// ceiling for everything above it.
func BenchmarkGemmKernel(b *testing.B) {
	for _, k := range gemmKernels {
		for _, kc := range []int{64, 128, 256} {
			b.Run(fmt.Sprintf("%s_kc%d", k.name, kc), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				a, bp := randVec(r, kc*gemmMR), randVec(r, kc*gemmNR)
				c := make([]float32, gemmMR*gemmNR)
				for b.Loop() {
					k.fn(kc, &a[0], &bp[0], &c[0], gemmNR, 1, 1)
				}
				b.ReportMetric(2*float64(gemmMR*gemmNR*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
