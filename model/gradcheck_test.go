package model

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// Gradient checks: every layer's backward and both models against central finite differences.
//
// The device computes in f32, so the scalar under test is L = Σ out⊙R (R fixed and random),
// reduced in float64 on the host, and each checked element w is perturbed by h = 1e-2·max(1,|w|):
// numeric = (L(w+h) − L(w−h)) / 2h. An element passes when
//
//	|analytic − numeric| ≤ gradRTol·max(|analytic|, |numeric|) + gradATol·max_i |analytic_i|
//
// with gradRTol = 1e-2 and gradATol = 1e-3 (relative to the tensor's largest gradient, which
// absorbs the f32 rounding noise of L for gradients near zero).
const (
	gradRTol = 1e-2
	gradATol = 1e-3
	gradMaxN = 48 // elements checked per tensor (random subset when larger)
)

// dotHost is Σ t⊙r in float64.
func dotHost(t *tensor.Tensor, r []float64) float64 {
	x := tensor.ToHost(t)
	var s float64
	for i, v := range x {
		s += float64(v) * r[i]
	}
	return s
}

func randF64(rng *rand.Rand, n int) []float64 {
	r := make([]float64, n)
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	return r
}

func f32of(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func randT(dev tensor.Device, rng *rand.Rand, tag string, std float64, shape ...int) *tensor.Tensor {
	x := make([]float32, tensor.Numel(shape))
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
	return tensor.FromHost(dev, tensor.F32, tag, x, shape...)
}

// checkGrad compares the analytic gradient of the f32 device tensor x (its values perturbed in
// place) with central differences of loss, on up to gradMaxN elements.
func checkGrad(t *testing.T, name string, x *tensor.Tensor, analytic []float32, loss func() float64, rng *rand.Rand, after func()) {
	t.Helper()
	if bad := checkGradH(t, name, x, analytic, loss, rng, after, 1e-2, true); bad > 0 {
		t.Errorf("%s: %d elements off", name, bad)
	}
}

// checkGradH is checkGrad with the step h = rel·max(1,|w|); it returns the number of elements
// outside the bound, reported with t.Errorf when report is set (else only logged).
func checkGradH(t *testing.T, name string, x *tensor.Tensor, analytic []float32, loss func() float64, rng *rand.Rand, after func(), rel float64, report bool) int {
	t.Helper()
	bad := 0
	if len(analytic) != x.Len() {
		t.Fatalf("%s: %d analytic values for %d elements", name, len(analytic), x.Len())
	}
	dev := x.Device()
	vals := tensor.ToHost(x)
	idx := rng.Perm(len(vals))
	if len(idx) > gradMaxN {
		idx = idx[:gradMaxN]
	}
	maxAbs := 0.0
	for _, a := range analytic {
		maxAbs = math.Max(maxAbs, math.Abs(float64(a)))
	}
	worst, worstAt := 0.0, -1
	for _, i := range idx {
		w := vals[i]
		h := float32(rel * math.Max(1, math.Abs(float64(w))))
		eval := func(v float32) float64 {
			vals[i] = v
			dev.Upload(x, vals)
			if after != nil {
				after()
			}
			return loss()
		}
		lp, lm := eval(w+h), eval(w-h)
		vals[i] = w
		dev.Upload(x, vals)
		if after != nil {
			after()
		}
		// the perturbation actually applied, after f32 rounding
		num := (lp - lm) / (float64(w+h) - float64(w-h))
		a := float64(analytic[i])
		bound := gradRTol*math.Max(math.Abs(a), math.Abs(num)) + gradATol*maxAbs
		if e := math.Abs(a-num) / math.Max(bound, 1e-30); e > worst {
			worst, worstAt = e, i
		}
		if math.Abs(a-num) > bound {
			bad++
			if report {
				t.Logf("%s[%d]: analytic %.6g, numeric %.6g (bound %.3g)", name, i, a, num, bound)
			}
		}
	}
	if testing.Verbose() && worstAt >= 0 {
		t.Logf("%s: %d elements, worst |a−n|/bound = %.3f at %d", name, len(idx), worst, worstAt)
	}
	return bad
}

func TestGradLinear(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dev := cpu.New()
		R, In, Out := 2+rng.Intn(5), 1+rng.Intn(6), 1+rng.Intn(6)
		ps := NewParams(dev)
		l := NewLinear(ps, "lin", In, Out, 0.5, true)
		ps.Build(tensor.F32)
		ps.Init(uint64(seed))
		dev.RandNormal(l.B.W, 0.3, 7)
		x := randT(dev, rng, "x", 1, R, In)
		r := randF64(rng, R*Out)
		loss := func() float64 {
			y := dev.Alloc(tensor.F32, "y", R, Out)
			defer dev.Free(y)
			l.Forward(y, x)
			return dotHost(y, r)
		}
		dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), R, Out)
		dx := dev.Alloc(tensor.F32, "dx", R, In)
		ps.ZeroGrad()
		l.Backward(dx, dy, x)
		name := fmt.Sprintf("seed%d.", seed)
		checkGrad(t, name+"x", x, tensor.ToHost(dx), loss, rng, nil)
		checkGrad(t, name+"w", l.W.W, tensor.ToHost(l.W.G), loss, rng, nil)
		checkGrad(t, name+"b", l.B.W, tensor.ToHost(l.B.G), loss, rng, nil)
	}
}

func TestGradActivations(t *testing.T) {
	for _, act := range []Activation{ReLU, GELU} {
		for seed := int64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewSource(seed))
			dev := cpu.New()
			n := 5 + rng.Intn(30)
			xs := make([]float32, n)
			for i := range xs { // keep ReLU's kink farther than h from every point
				xs[i] = float32(rng.NormFloat64())
				for math.Abs(float64(xs[i])) < 0.05 {
					xs[i] = float32(rng.NormFloat64())
				}
			}
			x := tensor.FromHost(dev, tensor.F32, "x", xs, n)
			r := randF64(rng, n)
			loss := func() float64 {
				y := dev.Alloc(tensor.F32, "y", n)
				defer dev.Free(y)
				ActivationForward(dev, act, y, x)
				return dotHost(y, r)
			}
			y := dev.Alloc(tensor.F32, "y", n)
			ActivationForward(dev, act, y, x)
			saved := y
			if act.NeedsInput() {
				saved = x
			}
			dx := tensor.FromHost(dev, tensor.F32, "dx", f32of(r), n) // in place: dx aliases dy
			ActivationBackward(dev, act, dx, dx, saved)
			checkGrad(t, fmt.Sprintf("%s.seed%d.x", act, seed), x, tensor.ToHost(dx), loss, rng, nil)
		}
	}
}

func TestGradDropoutAndResidual(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	dev := cpu.New()
	n := 40
	x := randT(dev, rng, "x", 1, n)
	fx := randT(dev, rng, "fx", 1, n)
	r := randF64(rng, n)
	const p, seed = 0.3, 99
	// out = x + dropout(fx)
	loss := func() float64 {
		d := dev.Alloc(tensor.F32, "d", n)
		out := dev.Alloc(tensor.F32, "out", n)
		defer dev.Free(d)
		defer dev.Free(out)
		DropoutForward(dev, d, fx, p, seed)
		ResidualForward(dev, out, x, d)
		return dotHost(out, r)
	}
	dout := tensor.FromHost(dev, tensor.F32, "dout", f32of(r), n)
	dx := dev.Alloc(tensor.F32, "dx", n)
	dev.Fill(dx, 0)
	ResidualBackward(dev, dx, dout)
	dfx := dev.Alloc(tensor.F32, "dfx", n)
	DropoutBackward(dev, dfx, dout, p, seed)
	checkGrad(t, "x", x, tensor.ToHost(dx), loss, rng, nil)
	checkGrad(t, "fx", fx, tensor.ToHost(dfx), loss, rng, nil)
}

func TestGradLayerNorm(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dev := cpu.New()
		R, C := 1+rng.Intn(6), 2+rng.Intn(10)
		ps := NewParams(dev)
		ln := NewLayerNorm(ps, "ln", C)
		ps.Build(tensor.F32)
		ps.Init(1)
		dev.RandNormal(ln.W.W, 0.5, 3)
		dev.RandNormal(ln.B.W, 0.5, 4)
		x := randT(dev, rng, "x", 2, R, C)
		r := randF64(rng, R*C)
		mean, rstd := dev.Alloc(tensor.F32, "mean", R), dev.Alloc(tensor.F32, "rstd", R)
		loss := func() float64 {
			y := dev.Alloc(tensor.F32, "y", R, C)
			defer dev.Free(y)
			ln.Forward(y, mean, rstd, x)
			return dotHost(y, r)
		}
		y := dev.Alloc(tensor.F32, "y", R, C)
		ln.Forward(y, mean, rstd, x)
		dy := tensor.FromHost(dev, tensor.F32, "dy", f32of(r), R, C)
		dx := dev.Alloc(tensor.F32, "dx", R, C)
		dev.Fill(dx, 0)
		ln.Backward(dx, dy, x, mean, rstd)
		name := fmt.Sprintf("seed%d.", seed)
		checkGrad(t, name+"x", x, tensor.ToHost(dx), loss, rng, nil)
		checkGrad(t, name+"w", ln.W.W, tensor.ToHost(ln.W.G), loss, rng, nil)
		checkGrad(t, name+"b", ln.B.W, tensor.ToHost(ln.B.G), loss, rng, nil)
	}
}

func TestGradEmbedding(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dev := cpu.New()
		B, T, V, C := 1+rng.Intn(3), 1+rng.Intn(5), 3+rng.Intn(5), 1+rng.Intn(6)
		ps := NewParams(dev)
		e := NewEmbedding(ps, V, T+2, C, 0.5)
		ps.Build(tensor.F32)
		ps.Init(uint64(seed))
		ids := make([]int32, B*T) // small V: repeated ids accumulate
		for i := range ids {
			ids[i] = int32(rng.Intn(V))
		}
		tok := dev.Alloc(tensor.I32, "ids", B, T)
		dev.UploadI32(tok, ids)
		r := randF64(rng, B*T*C)
		loss := func() float64 {
			out := dev.Alloc(tensor.F32, "out", B, T, C)
			defer dev.Free(out)
			e.Forward(out, tok)
			return dotHost(out, r)
		}
		e.Backward(tensor.FromHost(dev, tensor.F32, "dout", f32of(r), B, T, C), tok)
		name := fmt.Sprintf("seed%d.", seed)
		checkGrad(t, name+"wte", e.WTE.W, tensor.ToHost(e.WTE.G), loss, rng, nil)
		checkGrad(t, name+"wpe", e.WPE.W, tensor.ToHost(e.WPE.G), loss, rng, nil)
	}
}

func TestGradCrossEntropy(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dev := cpu.New()
		R, V := 2+rng.Intn(6), 2+rng.Intn(8)
		logits := randT(dev, rng, "logits", 2, R, V)
		tg := make([]int32, R)
		count := 0
		for i := range tg {
			tg[i] = int32(rng.Intn(V))
			if i == 1 {
				tg[i] = -1 // ignored row
			} else {
				count++
			}
		}
		targets := dev.Alloc(tensor.I32, "targets", R)
		dev.UploadI32(targets, tg)
		if got := CountTargets(targets); got != count {
			t.Fatalf("CountTargets = %d, want %d", got, count)
		}
		const dloss = 1.7
		lossT, losses := dev.Alloc(tensor.F32, "loss", 1), dev.Alloc(tensor.F32, "losses", R)
		loss := func() float64 {
			CrossEntropyForward(dev, lossT, losses, logits, targets, count)
			return dloss * float64(tensor.ToHost(lossT)[0])
		}
		// reference mean loss in float64
		lv, want := tensor.ToHost(logits), 0.0
		for i := 0; i < R; i++ {
			if tg[i] < 0 {
				continue
			}
			row, mx, s := lv[i*V:(i+1)*V], math.Inf(-1), 0.0
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			want += (math.Log(s) + mx - float64(row[tg[i]])) / float64(count)
		}
		if got := loss() / dloss; math.Abs(got-want) > 1e-5*math.Max(1, want) {
			t.Errorf("seed %d: loss %.7g, want %.7g", seed, got, want)
		}
		dl := dev.Alloc(tensor.F32, "dlogits", R, V)
		CrossEntropyBackward(dev, dl, logits, targets, dloss, count)
		checkGrad(t, fmt.Sprintf("seed%d.logits", seed), logits, tensor.ToHost(dl), loss, rng, nil)
	}
}

func TestGradAttention(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		for _, pm := range []struct {
			p    float32
			mode AttentionMode
		}{{0, AttnMaterialized}, {0.25, AttnMaterialized}, {0, AttnFlash}} {
			p := pm.p
			rng := rand.New(rand.NewSource(seed))
			dev := cpu.New()
			H := 1 + rng.Intn(3)
			B, T, C := 1+rng.Intn(2), 1+rng.Intn(5), H*(1+rng.Intn(3))
			ps := NewParams(dev)
			at := NewAttention(ps, "attn", C, H, 0.4, 0.4, p)
			at.Mode = pm.mode
			ps.Build(tensor.F32)
			ps.Init(uint64(seed))
			dev.RandNormal(at.QKV.B.W, 0.2, 5)
			dev.RandNormal(at.Proj.B.W, 0.2, 6)
			x := randT(dev, rng, "x", 1, B, T, C)
			r := randF64(rng, B*T*C)
			const dseed = 1234
			loss := func() float64 {
				out := dev.Alloc(tensor.F32, "out", B, T, C)
				defer dev.Free(out)
				a := at.Forward(out, x, p, dseed)
				a.Free(dev)
				return dotHost(out, r)
			}
			base := dev.Stats().Allocated
			out := dev.Alloc(tensor.F32, "out", B, T, C)
			a := at.Forward(out, x, p, dseed)
			dx := dev.Alloc(tensor.F32, "dx", B, T, C)
			at.Backward(dx, tensor.FromHost(dev, tensor.F32, "dout", f32of(r), B, T, C), x, a)
			name := fmt.Sprintf("%s.p%v.seed%d.", pm.mode, p, seed)
			checkGrad(t, name+"x", x, tensor.ToHost(dx), loss, rng, nil)
			for _, q := range ps.List {
				checkGrad(t, name+q.Name, q.W, tensor.ToHost(q.G), loss, rng, nil)
			}
			// everything but out, dx and dout is freed
			if got, want := dev.Stats().Allocated-base, 3*tensor.SizeClass(int64(4*B*T*C)); got != want {
				t.Errorf("%s after backward %d bytes still allocated, want %d", name, got, want)
			}
		}
	}
}

func TestGradBlock(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		for _, p := range []float32{0, 0.2} {
			rng := rand.New(rand.NewSource(seed))
			dev := cpu.New()
			B, T, C, H := 2, 1+rng.Intn(4), 4, 2
			ps := NewParams(dev)
			b := NewBlock(ps, "h.0", C, H, 0.3, 0.3, p)
			ps.Build(tensor.F32)
			ps.Init(uint64(seed))
			for _, q := range ps.List { // non-trivial LayerNorm gains and biases
				if q.Init.Std == 0 {
					dev.RandNormal(q.W, 0.2, tensor.DeriveSeed(9, q.Name))
					if q.Init.Value == 1 {
						dev.Axpy(q.W, 1, tensor.FromHost(dev, tensor.F32, "one", onesF32(q.W.Len()), q.W.Len()))
					}
				}
			}
			x := randT(dev, rng, "x", 1, B, T, C)
			r := randF64(rng, B*T*C)
			loss := func() float64 {
				a := b.Forward(x, 77, true)
				v := dotHost(a.Out, r)
				a.keepOnlyOut(dev, false)
				dev.Free(a.Out)
				return v
			}
			a := b.Forward(x, 77, true)
			dres := tensor.FromHost(dev, tensor.F32, "dres", f32of(r), B, T, C)
			b.Backward(dres, a)
			name := fmt.Sprintf("p%v.seed%d.", p, seed)
			checkGrad(t, name+"x", x, tensor.ToHost(dres), loss, rng, nil)
			for _, q := range ps.List {
				checkGrad(t, name+q.Name, q.W, tensor.ToHost(q.G), loss, rng, nil)
			}
		}
	}
}

func onesF32(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 1
	}
	return x
}

// checkModelGrads checks every parameter tensor of m on loss = Forward(in).
func checkModelGrads(t *testing.T, name string, m Model, in Inputs, rng *rand.Rand) {
	t.Helper()
	ps := m.Params()
	loss := func() float64 { return float64(tensor.ToHost(m.Forward(in, true))[0]) }
	ps.ZeroGrad()
	loss()
	m.Backward(1)
	grad := tensor.ToHost(ps.Grad)
	for _, q := range ps.List {
		checkGrad(t, name+"."+q.Name, q.W, grad[q.Offset:q.Offset+q.W.Len()], loss, rng, ps.SyncHalf)
	}
}

func mlpInputs(dev tensor.Device, rng *rand.Rand, B, in, classes int) Inputs {
	x := randT(dev, rng, "x", 1, B, in)
	tg := make([]int32, B)
	for i := range tg {
		tg[i] = int32(rng.Intn(classes))
	}
	targets := dev.Alloc(tensor.I32, "targets", B)
	dev.UploadI32(targets, tg)
	return Inputs{X: x, Targets: targets, Seed: 5}
}

func gptInputs(dev tensor.Device, rng *rand.Rand, B, T, V int) Inputs {
	tok, tg := make([]int32, B*T), make([]int32, B*T)
	valid := 0
	for i := range tok {
		tok[i] = int32(rng.Intn(V))
		tg[i] = int32(rng.Intn(V))
		if i%5 == 3 {
			tg[i] = -1
		} else {
			valid++
		}
	}
	tokens, targets := dev.Alloc(tensor.I32, "tokens", B, T), dev.Alloc(tensor.I32, "targets", B, T)
	dev.UploadI32(tokens, tok)
	dev.UploadI32(targets, tg)
	return Inputs{Tokens: tokens, Targets: targets, Valid: valid, Seed: 11}
}

func TestGradMLP(t *testing.T) {
	for i, cfg := range []MLPConfig{
		{Widths: []int{5, 7, 4}, Activation: "relu"},
		{Widths: []int{3, 6, 5, 3}, Activation: "gelu", Dropout: 0.2},
		{Widths: []int{4, 6, 6, 3}, Activation: "relu", Dropout: 0.1, Checkpoint: 1},
		{Widths: []int{4, 3}},
	} {
		rng := rand.New(rand.NewSource(int64(i + 1)))
		dev := cpu.New()
		m, err := NewMLP(dev, cfg, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		in := mlpInputs(dev, rng, 6, cfg.Widths[0], cfg.Widths[len(cfg.Widths)-1])
		checkModelGrads(t, fmt.Sprintf("mlp%d", i), m, in, rng)
	}
}

func TestGradGPT(t *testing.T) {
	for i, cfg := range []GPTConfig{
		{Layers: 2, Width: 8, Heads: 2, Context: 6, Vocab: 11, Tied: true},
		{Layers: 1, Width: 6, Heads: 3, Context: 5, Vocab: 7, Tied: false, Dropout: 0.1},
		{Layers: 2, Width: 4, Heads: 1, Context: 4, Vocab: 5, Tied: true, Dropout: 0.1, Checkpoint: 2},
	} {
		rng := rand.New(rand.NewSource(int64(i + 1)))
		dev := cpu.New()
		m, err := NewGPT(dev, cfg, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		// GPT-2's 0.02 init makes most gradients tiny; widen the weights so every path matters
		for _, q := range m.ps.List {
			if q.Init.Std > 0 {
				dev.RandNormal(q.W, 0.3, tensor.DeriveSeed(3, q.Name))
			} else if q.Init.Value == 0 {
				dev.RandNormal(q.W, 0.1, tensor.DeriveSeed(4, q.Name))
			}
		}
		in := gptInputs(dev, rng, 2, cfg.Context-1, cfg.Vocab)
		checkModelGrads(t, fmt.Sprintf("gpt%d", i), m, in, rng)
	}
}
