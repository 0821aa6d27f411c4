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

func relNorm(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		e := float64(a[i]) - float64(b[i])
		d += e * e
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / math.Max(n, 1e-30))
}

// lossAndGrads runs one forward and backward from zeroed gradients.
func lossAndGrads(m Model, in Inputs, scale float32) (float32, []float32) {
	ps := m.Params()
	ps.ZeroGrad()
	loss := tensor.ToHost(m.Forward(in, true))[0]
	m.Backward(scale)
	g := tensor.ToHost(ps.Grad)
	for i := range g {
		g[i] /= scale
	}
	return loss, g
}

// F16 and BF16 compute against F32, same weights and data. Tolerance: loss within 1e-2 (bf16 2e-2)
// relative; the whole gradient within 1e-2 (bf16 2e-2) relative L2 error and every parameter's
// within 5e-2 (bf16 0.1) (f16 keeps 11 significant bits, bf16 8; activations, logits and
// activation gradients are all rounded to it). This is the model's gradient check in bf16: the
// f32 gradients are the ones gradcheck_test.go checks against finite differences.
func TestMixedPrecision_closeToF32(t *testing.T) {
	dts := []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}
	tols := [][3]float64{{}, {1e-2, 1e-2, 5e-2}, {2e-2, 2e-2, 0.1}} // loss, gradient, one parameter's
	for _, kind := range []string{"mlp", "gpt"} {
		var loss [3]float32
		var grads [3][]float32
		var ps *Params
		for k, dt := range dts {
			dev := cpu.New()
			rng := rand.New(rand.NewSource(3))
			var m Model
			var in Inputs
			if kind == "mlp" {
				mm, err := NewMLP(dev, MLPConfig{Widths: []int{20, 32, 32, 10}, Activation: "gelu", Compute: dt}, 7)
				if err != nil {
					t.Fatal(err)
				}
				m, in = mm, mlpInputs(dev, rng, 32, 20, 10)
			} else {
				gm, err := NewGPT(dev, GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 40, Tied: true, Compute: dt}, 7)
				if err != nil {
					t.Fatal(err)
				}
				m, in = gm, gptInputs(dev, rng, 4, 16, 40)
			}
			loss[k], grads[k] = lossAndGrads(m, in, 1024)
			ps = m.Params()
		}
		for k := 1; k < len(dts); k++ {
			dt, tol := dts[k], tols[k]
			if e := math.Abs(float64(loss[k]-loss[0])) / float64(loss[0]); e > tol[0] {
				t.Errorf("%s: %s loss %v vs f32 %v", kind, dt, loss[k], loss[0])
			}
			if e := relNorm(grads[k], grads[0]); e > tol[1] {
				t.Errorf("%s: %s gradient relative error %.3g", kind, dt, e)
			} else {
				t.Logf("%s: loss f32 %.6f %s %.6f, gradient relative error %.3g", kind, loss[0], dt, loss[k], e)
			}
			for _, p := range ps.List {
				a, b := grads[k][p.Offset:p.Offset+p.W.Len()], grads[0][p.Offset:p.Offset+p.W.Len()]
				if e := relNorm(a, b); e > tol[2] {
					t.Errorf("%s: %s %s gradient relative error %.3g", kind, p.Name, dt, e)
				}
			}
		}
	}
}

// Activation checkpointing recomputes the same numbers: gradients and loss equal to the bit, with
// a smaller peak of allocated memory.
func TestCheckpoint_sameGradsLessMemory(t *testing.T) {
	type result struct {
		loss  float32
		grads []float32
		peak  int64
	}
	run := func(kind string, every int) result {
		dev := cpu.New()
		rng := rand.New(rand.NewSource(5))
		var m Model
		var in Inputs
		if kind != "mlp" {
			cfg := GPTConfig{Layers: 4, Width: 16, Heads: 2, Context: 16, Vocab: 30, Dropout: 0.1, Checkpoint: every}
			if kind != "gpt" { // the fused attention (the CPU's reference kernel), no dropout
				cfg.Dropout, cfg.Attention = 0, AttnFlash
				cfg.CheckpointKeepAttn = kind == "gpt-flash-keep"
			}
			gm, err := NewGPT(dev, cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			m, in = gm, gptInputs(dev, rng, 4, 16, 30)
		} else {
			mm, err := NewMLP(dev, MLPConfig{Widths: []int{16, 64, 64, 64, 64, 5}, Activation: "gelu", Dropout: 0.2, Checkpoint: every}, 3)
			if err != nil {
				t.Fatal(err)
			}
			m, in = mm, mlpInputs(dev, rng, 32, 16, 5)
		}
		base := dev.Stats().Allocated
		dev.ResetPeak()
		loss, g := lossAndGrads(m, in, 1)
		r := result{loss, g, dev.Stats().Peak - base}
		return r
	}
	for _, kind := range []string{"gpt", "gpt-flash", "gpt-flash-keep", "mlp"} {
		ref := run(kind, 0)
		for _, every := range []int{1, 2} {
			got := run(kind, every)
			if math.Float32bits(got.loss) != math.Float32bits(ref.loss) || !sameBits(got.grads, ref.grads) {
				t.Errorf("%s checkpoint every %d: loss %v vs %v, gradients differ (rel %.3g)", kind, every, got.loss, ref.loss, relNorm(got.grads, ref.grads))
			}
			if got.peak >= ref.peak {
				t.Errorf("%s checkpoint every %d: activation peak %s, not below %s", kind, every, tensor.FormatBytes(got.peak), tensor.FormatBytes(ref.peak))
			}
			t.Logf("%s checkpoint every %d: activation peak %s vs %s without", kind, every, tensor.FormatBytes(got.peak), tensor.FormatBytes(ref.peak))
		}
	}
}

// Backward frees every saved activation, Free returns the device to its baseline, and each
// parameter reports ready exactly once per backward, in reverse registration order.
func TestModels_memoryAndReadyOrder(t *testing.T) {
	for _, kind := range []string{"mlp", "gpt-tied", "gpt-untied", "gpt-f16-ckpt", "gpt-flash-keep-ckpt"} {
		dev := cpu.New()
		rng := rand.New(rand.NewSource(1))
		var m Model
		var in Inputs
		switch kind {
		case "mlp":
			mm, _ := NewMLP(dev, MLPConfig{Widths: []int{4, 8, 3}, Dropout: 0.1}, 1)
			m, in = mm, mlpInputs(dev, rng, 5, 4, 3)
		default:
			cfg := GPTConfig{Layers: 2, Width: 8, Heads: 2, Context: 8, Vocab: 13, Tied: kind != "gpt-untied", Dropout: 0.1}
			if kind == "gpt-f16-ckpt" {
				cfg.Compute, cfg.Checkpoint = tensor.F16, 1
			}
			if kind == "gpt-flash-keep-ckpt" {
				cfg.Dropout, cfg.Attention, cfg.Checkpoint, cfg.CheckpointKeepAttn = 0, AttnFlash, 1, true
			}
			gm, err := NewGPT(dev, cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			m, in = gm, gptInputs(dev, rng, 2, 8, 13)
		}
		ps := m.Params()
		var order []string
		ps.OnGradReady = func(p *Param) { order = append(order, p.Name) }
		base := dev.Stats().Allocated
		for step := 0; step < 2; step++ {
			order = order[:0]
			m.Forward(in, true)
			if kind == "mlp" {
				out := dev.Alloc(tensor.I32, "pred", 5)
				m.Predict(out)
				dev.Free(out)
			}
			m.Backward(1)
			if len(order) != len(ps.List) {
				t.Fatalf("%s: %d ready calls for %d parameters: %v", kind, len(order), len(ps.List), order)
			}
			for i, name := range order {
				if want := ps.List[len(ps.List)-1-i].Name; name != want {
					t.Fatalf("%s: ready #%d is %s, want %s", kind, i, name, want)
				}
			}
			kept := dev.Stats().Allocated - base
			if kind == "mlp" {
				kept -= tensor.SizeClass(4 * 5 * 3) // logits stay for Predict
			}
			if kept != 0 {
				t.Fatalf("%s: %d bytes still allocated after backward:\n%s", kind, kept, tensor.MemorySummary(dev))
			}
		}
		m.Forward(in, false) // evaluation keeps only the logits
		m.Free()
		for _, tt := range []*tensor.Tensor{in.X, in.Tokens, in.Targets} {
			if tt != nil {
				dev.Free(tt)
			}
		}
		if a := dev.Stats().Allocated; a != 0 {
			t.Fatalf("%s: %d bytes allocated after Free:\n%s", kind, a, tensor.MemorySummary(dev))
		}
	}
}

func TestGPT_predictAndEval(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewSource(2))
	m, err := NewGPT(dev, GPTConfig{Layers: 1, Width: 8, Heads: 2, Context: 6, Vocab: 9, Tied: true, Dropout: 0.3}, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := gptInputs(dev, rng, 2, 6, 9)
	l1 := tensor.ToHost(m.Forward(in, false))[0]
	l2 := tensor.ToHost(m.Forward(in, false))[0]
	if l1 != l2 || !(l1 > 0) {
		t.Fatalf("evaluation must be deterministic (no dropout): %v %v", l1, l2)
	}
	pred := dev.Alloc(tensor.I32, "pred", 12)
	m.Predict(pred)
	ids := make([]int32, 12)
	dev.DownloadI32(ids, pred)
	for _, id := range ids {
		if id < 0 || id >= 9 {
			t.Fatalf("prediction %d out of range", id)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	dev := cpu.New()
	for want, cfg := range map[string]MLPConfig{
		"Widths":     {Widths: []int{3}},
		"Widths[1]":  {Widths: []int{3, 0}},
		"Activation": {Widths: []int{3, 2}, Activation: "tanh"},
		"Dropout":    {Widths: []int{3, 2}, Dropout: 1},
		"Compute":    {Widths: []int{3, 2}, Compute: tensor.I32},
		"Checkpoint": {Widths: []int{3, 2}, Checkpoint: -1},
	} {
		if _, err := NewMLP(dev, cfg, 1); err == nil || !strings.Contains(err.Error(), "MLPConfig."+want) {
			t.Errorf("MLP %s: err = %v", want, err)
		}
	}
	ok := GPTConfig{Layers: 1, Width: 8, Heads: 2, Context: 4, Vocab: 5}
	for want, mod := range map[string]func(*GPTConfig){
		"Layers":  func(c *GPTConfig) { c.Layers = 0 },
		"Heads":   func(c *GPTConfig) { c.Heads = 3 },
		"Vocab":   func(c *GPTConfig) { c.Vocab = -1 },
		"Dropout": func(c *GPTConfig) { c.Dropout = -0.1 },
	} {
		c := ok
		mod(&c)
		if _, err := NewGPT(dev, c, 1); err == nil || !strings.Contains(err.Error(), "GPTConfig."+want) {
			t.Errorf("GPT %s: err = %v", want, err)
		}
	}
	m, _ := NewGPT(dev, ok, 1)
	names := []string{}
	for _, p := range m.Params().List[:8] {
		names = append(names, fmt.Sprintf("%s%v", p.Name, p.Decay))
	}
	if got := strings.Join(names, " "); got != "wtetrue wpetrue h.0.ln1.wfalse h.0.ln1.bfalse h.0.attn.qkv.wtrue h.0.attn.qkv.bfalse h.0.attn.proj.wtrue h.0.attn.proj.bfalse" {
		t.Errorf("registration order: %s", got)
	}
}

// A tiny GPT under f16 with the scaler and AdamW memorises a fixed batch.
func TestGPT_trainsF16(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewSource(9))
	m, err := NewGPT(dev, GPTConfig{Layers: 2, Width: 16, Heads: 2, Context: 8, Vocab: 12, Tied: true, Compute: tensor.F16, Checkpoint: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := gptInputs(dev, rng, 4, 8, 12)
	opt, _ := NewAdamW(m.Params(), DefaultAdamW())
	sc, _ := NewScaler(dev, DefaultScaler())
	var first, last float32
	for step := 0; step < 60; step++ {
		m.Params().ZeroGrad()
		last = tensor.ToHost(m.Forward(in, true))[0]
		if step == 0 {
			first = last
		}
		m.Backward(sc.Scale())
		if _, err := sc.Step(m.Params(), opt, 1e-2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loss %.3f → %.3f, scale %v, skipped %d", first, last, sc.Scale(), sc.Skipped())
	if !(last < 0.3*first) {
		t.Fatalf("loss %.3f → %.3f: not learning", first, last)
	}
}

// With Inputs.GradScale the GPT runs its head's backward inside the forward: the loss and every
// gradient are bit-identical to the plain Forward/Backward, parameters report ready in the same
// order, memory returns to the baseline, and a Backward with another scale is refused.
func TestGPT_fusedHeadBackward(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  GPTConfig
	}{
		{"tied-f32", GPTConfig{Layers: 2, Width: 16, Heads: 2, Context: 8, Vocab: 37, Tied: true, Dropout: 0.1, Compute: tensor.F32, LossChunk: 5}},
		{"untied-f16-ckpt", GPTConfig{Layers: 2, Width: 16, Heads: 2, Context: 8, Vocab: 37, Compute: tensor.F16, Checkpoint: 1, LossChunk: 7}},
	} {
		run := func(fused bool) (float32, []float32, []string) {
			dev := cpu.New()
			m, err := NewGPT(dev, c.cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			m.Params().OnGradReady = func(p *Param) { order = append(order, p.Name) }
			in := gptInputs(dev, rand.New(rand.NewSource(3)), 3, 8, c.cfg.Vocab)
			const scale = 256
			if fused {
				in.GradScale = scale
			}
			base := dev.Stats().Allocated
			m.Params().ZeroGrad()
			loss := tensor.ToHost(m.Forward(in, true))[0]
			m.Backward(scale)
			g := tensor.ToHost(m.Params().Grad)
			if got := dev.Stats().Allocated; got != base {
				t.Errorf("%s fused=%v: %d bytes allocated after backward, %d before", c.name, fused, got, base)
			}
			if fused { // a mismatched scale is refused
				m.Forward(in, true)
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s: Backward with another scale did not panic", c.name)
						}
					}()
					m.Backward(scale / 2)
				}()
			}
			return loss, g, order
		}
		l1, g1, o1 := run(false)
		l2, g2, o2 := run(true)
		if math.Float32bits(l1) != math.Float32bits(l2) || !sameBits(g1, g2) {
			t.Errorf("%s: fused head loss %v vs %v, gradients differ (rel %.3g)", c.name, l2, l1, relNorm(g2, g1))
		}
		if strings.Join(o1, ",") != strings.Join(o2, ",") {
			t.Errorf("%s: ready order differs:\n%v\n%v", c.name, o1, o2)
		}
	}
}
