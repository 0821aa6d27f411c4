package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range got {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// naiveMatMul is the float64 reference: C = alpha·op(A)·op(B) + beta·C.
func naiveMatMul(a, b, c []float32, m, n, k int, ta, tb bool, alpha, beta float64) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if ta {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if tb {
					bv = b[j*k+p]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = alpha*s + beta*float64(c[i*n+j])
		}
	}
	return out
}

func TestCPU_matMulAllTransposes(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 130, 257}, {5, 1100, 130}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
					a, b, c := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
					roundTo(dt, a)
					roundTo(dt, b)
					ashape := []int{m, k}
					if ta {
						ashape = []int{k, m}
					}
					bshape := []int{k, n}
					if tb {
						bshape = []int{n, k}
					}
					A, B := tensor.FromHost(dev, dt, "a", a, ashape...), tensor.FromHost(dev, dt, "b", b, bshape...)
					C := tensor.FromHost(dev, tensor.F32, "c", c, m, n)
					dev.MatMul(C, A, B, ta, tb, 0.5, 1)
					want := naiveMatMul(a, b, c, m, n, k, ta, tb, 0.5, 1)
					if e := relErr(tensor.ToHost(C), want); e > 1e-5 {
						t.Fatalf("MatMul %v ta=%v tb=%v %s: rel err %g", sh, ta, tb, dt, e)
					}
					for _, x := range []*tensor.Tensor{A, B, C} {
						dev.Free(x)
					}
				}
			}
		}
	}
}

func TestCPU_batchedMatMul(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(5, 6))
	nb, m, n, k := 3, 6, 5, 4
	a, b := randVec(r, nb*k*m), randVec(r, nb*n*k)
	A, B := tensor.FromHost(dev, tensor.F32, "a", a, nb, k, m), tensor.FromHost(dev, tensor.F32, "b", b, nb, n, k)
	C := dev.Alloc(tensor.F32, "c", nb, m, n)
	dev.BatchedMatMul(C, A, B, true, true, 1, 0)
	got := tensor.ToHost(C)
	for i := 0; i < nb; i++ {
		want := naiveMatMul(a[i*k*m:(i+1)*k*m], b[i*n*k:(i+1)*n*k], make([]float32, m*n), m, n, k, true, true, 1, 0)
		if e := relErr(got[i*m*n:(i+1)*m*n], want); e > 1e-6 {
			t.Fatalf("batch %d rel err %g", i, e)
		}
	}
}

func TestCPU_softmaxCausalAndCrossEntropy(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(7, 8))
	T := 5
	x := randVec(r, 2*T*T)
	X := tensor.FromHost(dev, tensor.F32, "x", x, 2, T, T)
	Y := dev.Alloc(tensor.F32, "y", 2, T, T)
	dev.Softmax(Y, X, 0.5, true)
	y := tensor.ToHost(Y)
	for row := 0; row < 2*T; row++ {
		i := row % T
		var s float64
		for j := 0; j < T; j++ {
			v := y[row*T+j]
			if j > i && v != 0 {
				t.Fatalf("row %d col %d above the diagonal is %g", row, j, v)
			}
			s += float64(v)
		}
		if math.Abs(s-1) > 1e-6 {
			t.Fatalf("row %d sums to %g", row, s)
		}
	}
	// Cross-entropy of huge logits stays finite (stability).
	L := tensor.FromHost(dev, tensor.F32, "logits", []float32{1000, 0, -1000, 3, 3, 3}, 2, 3)
	tg := dev.Alloc(tensor.I32, "t", 2)
	dev.UploadI32(tg, []int32{1, -1})
	loss := dev.Alloc(tensor.F32, "loss", 2)
	dev.CrossEntropy(loss, L, tg)
	got := tensor.ToHost(loss)
	if math.Abs(float64(got[0])-1000) > 1e-3 || got[1] != 0 {
		t.Fatalf("cross-entropy %v, want [1000 0]", got)
	}
}

func TestCPU_splitMergePermuteInverse(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(9, 10))
	B, T, H, hs := 2, 3, 4, 5
	x := randVec(r, B*T*3*H*hs)
	QKV := tensor.FromHost(dev, tensor.F32, "qkv", x, B, T, 3*H*hs)
	q, k, v := dev.Alloc(tensor.F32, "q", B, H, T, hs), dev.Alloc(tensor.F32, "k", B, H, T, hs), dev.Alloc(tensor.F32, "v", B, H, T, hs)
	dev.SplitQKV(q, k, v, QKV)
	// k[b,h,t,:] == qkv[b,t,C + h*hs : …]
	kh := tensor.ToHost(k)
	C := H * hs
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for tt := 0; tt < T; tt++ {
				for d := 0; d < hs; d++ {
					if kh[((b*H+h)*T+tt)*hs+d] != x[(b*T+tt)*3*C+C+h*hs+d] {
						t.Fatal("SplitQKV put k in the wrong place")
					}
				}
			}
		}
	}
	back := dev.Alloc(tensor.F32, "back", B, T, 3*H*hs)
	dev.MergeQKV(back, q, k, v)
	for i, w := range tensor.ToHost(back) {
		if w != x[i] {
			t.Fatal("MergeQKV is not SplitQKV's inverse")
		}
	}
	p := dev.Alloc(tensor.F32, "p", B, T, H, hs)
	dev.Permute0213(p, q)
	pp := dev.Alloc(tensor.F32, "pp", B, H, T, hs)
	dev.Permute0213(pp, p)
	qh := tensor.ToHost(q)
	for i, w := range tensor.ToHost(pp) {
		if w != qh[i] {
			t.Fatal("Permute0213 twice is not the identity")
		}
	}
}

func TestCPU_layerNormForward(t *testing.T) {
	dev := New()
	r := rand.New(rand.NewPCG(11, 12))
	R, C := 7, 33
	x, w, b := randVec(r, R*C), randVec(r, C), randVec(r, C)
	X, W, Bb := tensor.FromHost(dev, tensor.F32, "x", x, R, C), tensor.FromHost(dev, tensor.F32, "w", w, C), tensor.FromHost(dev, tensor.F32, "b", b, C)
	Y, M, S := dev.Alloc(tensor.F32, "y", R, C), dev.Alloc(tensor.F32, "m", R), dev.Alloc(tensor.F32, "s", R)
	dev.LayerNorm(Y, M, S, X, W, Bb, 1e-5)
	want := make([]float64, R*C)
	for i := 0; i < R; i++ {
		var m, v float64
		for j := 0; j < C; j++ {
			m += float64(x[i*C+j])
		}
		m /= float64(C)
		for j := 0; j < C; j++ {
			d := float64(x[i*C+j]) - m
			v += d * d
		}
		rs := 1 / math.Sqrt(v/float64(C)+1e-5)
		for j := 0; j < C; j++ {
			want[i*C+j] = (float64(x[i*C+j])-m)*rs*float64(w[j]) + float64(b[j])
		}
	}
	if e := relErr(tensor.ToHost(Y), want); e > 1e-6 {
		t.Fatalf("LayerNorm rel err %g", e)
	}
}

func TestCPU_unscaleCheckFindsInfAndNaN(t *testing.T) {
	dev := New()
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		x := make([]float32, 100000)
		x[77777] = bad
		X := tensor.FromHost(dev, tensor.F32, "g", x, len(x))
		found := tensor.FromHost(dev, tensor.F32, "found", []float32{0}, 1)
		dev.UnscaleCheck(X, 0.5, found)
		if tensor.ToHost(found)[0] != 1 {
			t.Fatalf("UnscaleCheck missed %g", bad)
		}
	}
	X := tensor.FromHost(dev, tensor.F32, "g", []float32{2, 4}, 2)
	found := tensor.FromHost(dev, tensor.F32, "found", []float32{0}, 1)
	dev.UnscaleCheck(X, 0.5, found)
	if tensor.ToHost(found)[0] != 0 || tensor.ToHost(X)[1] != 2 {
		t.Fatal("UnscaleCheck flagged finite values or did not scale")
	}
}

func TestPool_countsAndReuse(t *testing.T) {
	dev := New()
	base := dev.Stats()
	a := dev.Alloc(tensor.F32, "a", 1000)
	s := dev.Stats()
	if s.Allocated-base.Allocated != tensor.SizeClass(4000) || s.Peak < s.Allocated {
		t.Fatalf("after alloc: %+v", s)
	}
	dev.Free(a)
	b := dev.Alloc(tensor.F16, "b", 2000) // same size class: reused, no new reservation
	s2 := dev.Stats()
	if s2.Reserved != s.Reserved || s2.RawAllocs != s.RawAllocs {
		t.Fatalf("freed block not reused: %+v then %+v", s, s2)
	}
	dev.Free(b)
	if dev.Stats().Allocated != base.Allocated {
		t.Fatal("allocated did not return to the baseline")
	}
	dev.EmptyCache()
	if st := dev.Stats(); st.Reserved != st.Allocated {
		t.Fatalf("EmptyCache left %+v", st)
	}
	dev.SetLimit(1 << 20)
	err := tensor.CatchOOM(func() { dev.Alloc(tensor.F32, "huge", 1<<20) })
	if !tensor.IsOOM(err) {
		t.Fatalf("expected OOM under the limit, got %v", err)
	}
	if dev.Stats().Allocated != base.Allocated {
		t.Fatal("failed allocation changed the counters")
	}
}

func BenchmarkCPU_MatMul1024(b *testing.B) {
	dev := New()
	r := rand.New(rand.NewPCG(1, 1))
	A := tensor.FromHost(dev, tensor.F32, "a", randVec(r, 128*1024), 128, 1024)
	W := tensor.FromHost(dev, tensor.F32, "w", randVec(r, 1024*1024), 1024, 1024)
	C := dev.Alloc(tensor.F32, "c", 128, 1024)
	b.ReportMetric(0, "ns/op")
	for b.Loop() {
		dev.MatMul(C, A, W, false, true, 1, 0)
	}
	b.ReportMetric(2*128*1024*1024*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// The CPU device's fences are done when made (its operations finish before they return), and the
// work before one is visible; a spent fence stays done.
func TestDevice_fence(t *testing.T) {
	var dev tensor.Device = New()
	x := tensor.FromHost(dev, tensor.F32, "x", []float32{1, 2, 3}, 3)
	defer dev.Free(x)
	dev.Scale(x, 2)
	f := dev.Fence()
	if !f.Done() {
		t.Fatal("a CPU fence is not done when made")
	}
	f.Wait()
	f.Wait()
	if !f.Done() {
		t.Fatal("a spent fence is not done")
	}
	if got := tensor.ToHost(x); got[0] != 2 || got[1] != 4 || got[2] != 6 {
		t.Fatalf("after the fence x = %v, want [2 4 6]", got)
	}
}

// Copy between the two 16-bit formats widens exactly and rounds once: the same bits as going
// through an f32 tensor (the CUDA device's tests use this as their reference).
func TestCopy_f16AndBF16(t *testing.T) {
	dev := New()
	v := []float32{0, -1.5, 3.140625, 65504, 1e-7, -2.5e-3, 300.7, 1 << 20}
	for _, pair := range [][2]tensor.DType{{tensor.F16, tensor.BF16}, {tensor.BF16, tensor.F16}} {
		src := tensor.FromHost(dev, pair[0], "src", v, len(v))
		direct, wide, via := dev.Alloc(pair[1], "direct", len(v)), dev.Alloc(tensor.F32, "wide", len(v)), dev.Alloc(pair[1], "via", len(v))
		dev.Copy(direct, src)
		dev.Copy(wide, src)
		dev.Copy(via, wide)
		if a, b := h16s(direct), h16s(via); !slices.Equal(a, b) {
			t.Errorf("%s → %s: %v, through f32 %v", pair[0], pair[1], a, b)
		}
	}
}

// SumSquaresF64 adds each view's float64 sum of squares in order: against a plain float64 loop,
// within float64's rounding (its partial sums are in another order), and 0 for no views.
func TestSumSquaresF64(t *testing.T) {
	d := New()
	r := rand.New(rand.NewPCG(3, 4))
	host := make([]float32, 200_003)
	for i := range host {
		host[i] = float32(r.NormFloat64())
	}
	slab := tensor.FromHost(d, tensor.F32, "slab", host, len(host))
	var want float64
	var views []*tensor.Tensor
	for _, rg := range [][2]int{{0, 3}, {50, 50}, {100, 150_000}, {160_000, 200_003}} {
		views = append(views, slab.View(rg[0], rg[1]-rg[0]))
		for _, v := range host[rg[0]:rg[1]] {
			want += float64(v) * float64(v)
		}
	}
	if got := d.SumSquaresF64(views); math.Abs(got-want) > 1e-12*want {
		t.Errorf("SumSquaresF64 = %.17g, want %.17g", got, want)
	}
	if got := d.SumSquaresF64(nil); got != 0 {
		t.Errorf("SumSquaresF64(nil) = %g, want 0", got)
	}
}
