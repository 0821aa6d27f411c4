package model

import (
	"math"
	"math/rand"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// Optimizers against float64 references of their formulas, over several steps with fresh
// gradients, a decayed and a non-decayed parameter, and the f16 copy. Tolerance: |w − ref| ≤
// 1e-5·max(1,|ref|) (f32 arithmetic on values of order 1); the f16 copy equals the rounded master.

func optimParams(t *testing.T, compute tensor.DType) (*cpu.Device, *Params) {
	dev := cpu.New()
	ps := NewParams(dev)
	ps.Add("w", Init{Std: 1}, true, 3, 4)
	ps.Add("b", Init{Std: 1}, false, 5)
	ps.Add("w2", Init{Std: 1}, true, 7)
	ps.Build(compute)
	ps.Init(3)
	return dev, ps
}

func checkVec(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*math.Max(1, math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %.8g, want %.8g", what, i, got[i], want[i])
		}
	}
}

func checkHalf(t *testing.T, ps *Params) {
	t.Helper()
	w := ps.Host()
	h := tensor.ToHost(ps.Half)
	for i := range w {
		f := half.F16
		if ps.Half.DType() == tensor.BF16 {
			f = half.BF16
		}
		if h[i] != f.ToFloat32(f.FromFloat32(w[i])) {
			t.Fatalf("%s copy [%d] = %v, master %v", ps.Half.DType(), i, h[i], w[i])
		}
	}
}

func TestAdamW_matchesReference(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) { testAdamW(t, dt) })
	}
}

func testAdamW(t *testing.T, compute tensor.DType) {
	dev, ps := optimParams(t, compute)
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	opt, err := NewAdamW(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	w := make([]float64, ps.N)
	for i, v := range ps.Host() {
		w[i] = float64(v)
	}
	m, v := make([]float64, ps.N), make([]float64, ps.N)
	for step := 1; step <= 5; step++ {
		g := make([]float32, ps.N)
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		dev.Upload(ps.Grad, g)
		lr := 0.01 * float64(step)
		opt.Step(float32(lr))
		for _, p := range ps.List {
			wd := 0.0
			if p.Decay {
				wd = float64(cfg.WeightDecay)
			}
			for i := p.Offset; i < p.Offset+p.W.Len(); i++ {
				b1, b2 := float64(cfg.Beta1), float64(cfg.Beta2)
				m[i] = b1*m[i] + (1-b1)*float64(g[i])
				v[i] = b2*v[i] + (1-b2)*float64(g[i])*float64(g[i])
				mh := m[i] / (1 - math.Pow(b1, float64(step)))
				vh := v[i] / (1 - math.Pow(b2, float64(step)))
				w[i] -= lr * (mh/(math.Sqrt(vh)+float64(cfg.Eps)) + wd*w[i])
			}
		}
		checkVec(t, "w", ps.Host(), w)
		checkVec(t, "m", tensor.ToHost(opt.M), m)
		checkVec(t, "v", tensor.ToHost(opt.V), v)
		checkHalf(t, ps)
	}
	if opt.Steps() != 5 {
		t.Fatalf("Steps = %d", opt.Steps())
	}
	st := opt.State()
	if len(st) != 2 || st[0].Name != "adamw.m" || st[1].Name != "adamw.v" || st[0].T.Len() != ps.N {
		t.Fatalf("State = %v", st)
	}
	opt.Free()
}

func TestSGD_matchesReference(t *testing.T) {
	for _, cfg := range []SGDConfig{
		{},
		{Momentum: 0.9, WeightDecay: 0.01},
		{Momentum: 0.8, Nesterov: true, WeightDecay: 0.05},
	} {
		dev, ps := optimParams(t, tensor.F32)
		opt, err := NewSGD(ps, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewSource(2))
		w := make([]float64, ps.N)
		for i, v := range ps.Host() {
			w[i] = float64(v)
		}
		buf := make([]float64, ps.N)
		for step := 1; step <= 4; step++ {
			g := make([]float32, ps.N)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			dev.Upload(ps.Grad, g)
			const lr = 0.1
			opt.Step(lr)
			mu := float64(cfg.Momentum)
			for _, p := range ps.List {
				wd := 0.0
				if p.Decay {
					wd = float64(cfg.WeightDecay)
				}
				for i := p.Offset; i < p.Offset+p.W.Len(); i++ {
					d := float64(g[i]) + wd*w[i]
					if mu > 0 {
						buf[i] = mu*buf[i] + d
						if cfg.Nesterov {
							d += mu * buf[i]
						} else {
							d = buf[i]
						}
					}
					w[i] -= lr * d
				}
			}
			checkVec(t, "w", ps.Host(), w)
		}
		if (cfg.Momentum > 0) != (len(opt.State()) == 1) {
			t.Fatalf("%+v: State = %v", cfg, opt.State())
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	dev, ps := optimParams(t, tensor.F32)
	g := make([]float32, ps.N)
	var sq float64
	for i := range g {
		g[i] = float32(i%7) - 3
		sq += float64(g[i]) * float64(g[i])
	}
	dev.Upload(ps.Grad, g)
	norm := ClipGradNorm(ps, 1)
	if math.Abs(float64(norm)-math.Sqrt(sq)) > 1e-4*math.Sqrt(sq) {
		t.Fatalf("norm %v, want %v", norm, math.Sqrt(sq))
	}
	if after := ClipGradNorm(ps, 0); math.Abs(float64(after)-1) > 1e-4 {
		t.Fatalf("norm after clipping to 1: %v", after)
	}
	if again := ClipGradNorm(ps, 5); math.Abs(float64(again)-1) > 1e-4 {
		t.Fatalf("a norm below max must be left alone: %v", again)
	}
}

func TestSchedules(t *testing.T) {
	c := ConstantLR(0.3)
	if c(0) != 0.3 || c(1e6) != 0.3 {
		t.Fatal("constant")
	}
	s, err := NewSchedule(ScheduleConfig{Kind: "cosine", LR: 1, MinLR: 0.1, Warmup: 10, Total: 110})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step int64
		want float64
	}{{0, 0.1}, {4, 0.5}, {9, 1}, {10, 1}, {60, 0.55}, {110, 0.1}, {500, 0.1}} {
		if got := s(tc.step); math.Abs(float64(got)-tc.want) > 1e-6 {
			t.Errorf("lr(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	for i := int64(10); i < 110; i++ {
		if s(i+1) > s(i) {
			t.Fatalf("cosine rises at %d", i)
		}
	}
	for _, bad := range []ScheduleConfig{{Kind: "cosine", LR: 1, Warmup: 5, Total: 5}, {Kind: "step", LR: 1}, {LR: 0}, {Kind: "cosine", LR: 1, MinLR: 2, Total: 3}} {
		if _, err := NewSchedule(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// multiCPU is the CPU device with MultiAdamW implemented by one AdamW call per run, so the
// optimizer's multi path can be checked on the CPU against its per-run fallback.
type multiCPU struct {
	*cpu.Device
	tables, calls int
}

func (d *multiCPU) AdamWTable(runs []tensor.AdamWRun) *tensor.Tensor {
	d.tables++
	t := d.Alloc(tensor.I32, "adamw.runs", 2*len(runs))
	d.Fill(t, 0)
	return t
}

func (d *multiCPU) AdamWRuns(p, g, m, v, half *tensor.Tensor, runs []tensor.AdamWRun, table *tensor.Tensor, a tensor.AdamWArgs) {
	d.calls++
	if table == nil || table.Len() != 2*len(runs) {
		panic("multiCPU: bad table")
	}
	wd := a.WeightDecay
	end := 0
	for _, r := range runs {
		if r.Off != end {
			panic("multiCPU: runs do not partition the slab")
		}
		end += r.N
		a.WeightDecay = 0
		if r.Decay {
			a.WeightDecay = wd
		}
		var h *tensor.Tensor
		if half != nil {
			h = half.View(r.Off, r.N)
		}
		d.Device.AdamW(p.View(r.Off, r.N), g.View(r.Off, r.N), m.View(r.Off, r.N), v.View(r.Off, r.N), h, a)
	}
	if end != p.Len() {
		panic("multiCPU: runs do not cover the slab")
	}
}

var _ tensor.MultiAdamW = (*multiCPU)(nil)

func bitsEqual(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s[%d]: %v (multi) vs %v (per run)", what, i, a[i], b[i])
		}
	}
}

// On a MultiAdamW device AdamW takes one AdamWRuns call per step with the decay runs, giving the
// per-run fallback's results bit for bit, and frees the run table with the moments.
func TestAdamW_multiMatchesPerRun(t *testing.T) {
	dev := &multiCPU{Device: cpu.New()}
	base := dev.Stats().Allocated
	var pss [2]*Params
	var opts [2]*AdamW
	for k := range pss {
		ps := NewParams(dev)
		ps.Add("w", Init{Std: 1}, true, 3, 4)
		ps.Add("w1", Init{Std: 1}, true, 6)
		ps.Add("b", Init{Std: 1}, false, 5)
		ps.Add("g", Init{Value: 1}, false, 2)
		ps.Add("w2", Init{Std: 1}, true, 7)
		ps.Add("b2", Init{Std: 1}, false, 1)
		ps.Build(tensor.F16)
		ps.Init(3)
		opt, err := NewAdamW(ps, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.3})
		if err != nil {
			t.Fatal(err)
		}
		if opt.multi == nil || len(opt.aruns) != 4 || opt.table == nil {
			t.Fatalf("multi path not set up: %d runs, table %v", len(opt.aruns), opt.table)
		}
		opt.perRun = k == 1
		pss[k], opts[k] = ps, opt
	}
	rng := rand.New(rand.NewSource(5))
	for step := 1; step <= 3; step++ {
		g := make([]float32, pss[0].N)
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		for k := range pss {
			dev.Upload(pss[k].Grad, g)
			opts[k].Step(0.05)
		}
		bitsEqual(t, "w", pss[0].Host(), pss[1].Host())
		bitsEqual(t, "half", tensor.ToHost(pss[0].Half), tensor.ToHost(pss[1].Half))
		bitsEqual(t, "m", tensor.ToHost(opts[0].M), tensor.ToHost(opts[1].M))
		bitsEqual(t, "v", tensor.ToHost(opts[0].V), tensor.ToHost(opts[1].V))
	}
	if dev.tables != 2 || dev.calls != 3 {
		t.Fatalf("%d tables, %d AdamWRuns calls; want 2 and 3", dev.tables, dev.calls)
	}
	for k := range pss {
		opts[k].Free()
		pss[k].Free()
	}
	if a := dev.Stats().Allocated; a != base {
		t.Fatalf("allocated %d after Free, %d before", a, base)
	}
}

// AdamW.StepScaled(lr, c) is Scale(gradients, c) then Step(lr), bit for bit (the same f32 product
// of each gradient element, taken inside the step instead of written back first), in f32 and with
// the f16 copy, over steps whose factors clip and do not (0); and GradNormCoef's factor is the
// one ClipGradNorm scales by.
func TestAdamW_stepScaledIsScaleThenStep(t *testing.T) {
	for _, compute := range []tensor.DType{tensor.F32, tensor.F16} {
		devA, a := optimParams(t, compute)
		devB, b := optimParams(t, compute)
		cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
		oa, err := NewAdamW(a, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ob, err := NewAdamW(b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !ob.GradScaled() {
			t.Fatal("AdamW on the CPU device cannot take a gradient scale")
		}
		r := rand.New(rand.NewSource(5 + int64(compute)))
		g := make([]float32, a.N)
		for step, maxNorm := range []float32{0.5, 0, 1e9, 0.01, 2} {
			for i := range g {
				g[i] = float32(r.NormFloat64()) * 3
			}
			devA.Upload(a.Grad, g)
			devB.Upload(b.Grad, g)
			normA := ClipGradNorm(a, maxNorm)
			oa.Step(1e-2)
			normB, coef := GradNormCoef(b, maxNorm)
			if math.Float32bits(normA) != math.Float32bits(normB) {
				t.Fatalf("step %d: GradNormCoef's norm %g, ClipGradNorm's %g", step, normB, normA)
			}
			if clip := maxNorm > 0 && normB > maxNorm; clip != (coef != 0) {
				t.Fatalf("step %d: norm %g, max %g: factor %g", step, normB, maxNorm, coef)
			}
			ob.StepScaled(1e-2, coef)
			for k, p := range [][2]*tensor.Tensor{{a.Data, b.Data}, {oa.M, ob.M}, {oa.V, ob.V}} {
				x, y := tensor.ToHost(p[0]), tensor.ToHost(p[1])
				for i := range x {
					if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
						t.Fatalf("%s step %d (max %g): %s[%d] %g scaled in the step, %g by a pass first", compute, step, maxNorm, []string{"weights", "m", "v"}[k], i, y[i], x[i])
					}
				}
			}
			if a.Half != nil {
				x, y := tensor.ToHost(a.Half), tensor.ToHost(b.Half)
				for i := range x {
					if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
						t.Fatalf("%s step %d: half[%d] %g scaled in the step, %g by a pass first", compute, step, i, y[i], x[i])
					}
				}
			}
		}
	}
}
