//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
)

// Models on the GPU: a GPT's loss and gradients against the CPU's (through the materialised and
// the fused attention), training with AdamW and the loss scaler, and the GPT-2 small benchmark.
// The CUDA device's own operations are tested in model/cuda.

var (
	cudaOnce sync.Once
	cudaDev  *cuda.Device
	cudaErr  error
)

// gpu opens GPU 0 once for the package's tests.
func gpu(t testing.TB) *cuda.Device {
	cudaOnce.Do(func() { cudaDev, cudaErr = cuda.New(0) })
	if cudaErr != nil {
		t.Fatalf("cuda.New(0): %v", cudaErr)
	}
	return cudaDev
}

func cuTinyGPT(dt tensor.DType) GPTConfig {
	return GPTConfig{Layers: 2, Width: 64, Heads: 4, Context: 32, Vocab: 97, Tied: true, Compute: dt}
}

func cuGPTInputs(dev tensor.Device, r *rand.Rand, B, T, V int) Inputs {
	tok, tg := make([]int32, B*T), make([]int32, B*T)
	for i := range tok {
		tok[i] = int32(r.IntN(V))
		tg[i] = int32((int(tok[i])*7 + 3) % V) // a learnable map
	}
	x, y := dev.Alloc(tensor.I32, "tokens", B, T), dev.Alloc(tensor.I32, "targets", B, T)
	dev.UploadI32(x, tok)
	dev.UploadI32(y, tg)
	return Inputs{Tokens: x, Targets: y, Valid: B * T, Seed: 1}
}

// A GPT's loss and every parameter's gradient on the GPU match the CPU's, f32 and f16.
func TestCUDA_gptMatchesCPU(t *testing.T) {
	g := gpu(t)
	base := g.Stats().Allocated
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		cfg := cuTinyGPT(dt)
		var loss [2]float32
		var grads [2][]float32
		var mods [2]*GPT
		for i, dev := range []tensor.Device{cpu.New(), g} {
			m, err := NewGPT(dev, cfg, 7)
			if err != nil {
				t.Fatal(err)
			}
			in := cuGPTInputs(dev, rand.New(rand.NewPCG(1, 2)), 3, 32, cfg.Vocab)
			m.Params().ZeroGrad()
			loss[i] = tensor.ToHost(m.Forward(in, true))[0]
			m.Backward(1)
			grads[i] = tensor.ToHost(m.Params().Grad)
			mods[i] = m
			dev.Free(in.Tokens)
			dev.Free(in.Targets)
		}
		tol := 1e-5
		if dt == tensor.F16 {
			tol = 1e-2
		}
		if e := math.Abs(float64(loss[1]-loss[0])) / math.Abs(float64(loss[0])); !(e <= tol) {
			t.Errorf("%s: loss GPU %v CPU %v", dt, loss[1], loss[0])
		}
		for _, p := range mods[0].Params().List {
			a, b := grads[1][p.Offset:p.Offset+tensor.Numel(p.Shape)], grads[0][p.Offset:p.Offset+tensor.Numel(p.Shape)]
			var num, den float64
			for j := range a {
				d := float64(a[j]) - float64(b[j])
				num += d * d
				den += float64(b[j]) * float64(b[j])
			}
			e := math.Sqrt(num / math.Max(den, 1e-30))
			ptol := tol * 10 // a parameter's gradient alone sums fewer terms
			if !(e <= ptol) {
				t.Errorf("%s: gradient of %s: relative error %g > %g", dt, p.Name, e, ptol)
			}
		}
		mods[0].Free()
		mods[1].Free()
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after freeing the models, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// A tiny GPT trains on the GPU with f16 mixed precision, AdamW and the loss scaler: the loss of a
// learnable token map falls, and memory returns to its baseline afterwards.
func TestCUDA_gptTrains(t *testing.T) {
	g := gpu(t)
	base := g.Stats().Allocated
	cfg := cuTinyGPT(tensor.F16)
	m, err := NewGPT(g, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := NewAdamW(m.Params(), DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScaler(g, DefaultScaler())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	var first, last float32
	for step := 0; step < 150; step++ {
		in := cuGPTInputs(g, r, 8, 32, cfg.Vocab)
		m.Params().ZeroGrad()
		loss := tensor.ToHost(m.Forward(in, true))[0]
		m.Backward(sc.Scale())
		if _, err := sc.Step(m.Params(), opt, 3e-3); err != nil {
			t.Fatal(err)
		}
		g.Free(in.Tokens)
		g.Free(in.Targets)
		if step == 0 {
			first = loss
		}
		last = loss
	}
	t.Logf("loss %.3f → %.3f in 150 steps (ln V = %.3f)", first, last, math.Log(float64(cfg.Vocab)))
	if !(last < 0.5*first) {
		t.Errorf("loss went from %v to %v: not learning", first, last)
	}
	opt.Free()
	sc.Free()
	m.Free()
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after training and freeing, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// TestCUDA_gpt2Bench times GPT-2 small (124M) training steps when GODDP_BENCH is set, e.g.
// GODDP_BENCH=16,8 (batch sizes). It prints tokens/s, step time and peak memory per batch.
func TestCUDA_gpt2Bench(t *testing.T) {
	spec := os.Getenv("GODDP_BENCH")
	if spec == "" {
		t.Skip("set GODDP_BENCH=16,8 to run")
	}
	g := gpu(t)
	steps := 20
	if s := os.Getenv("GODDP_BENCH_STEPS"); s != "" {
		fmt.Sscan(s, &steps)
	}
	var rows []string
	for _, f := range strings.Split(spec, ",") {
		var B int
		fmt.Sscan(f, &B)
		rows = append(rows, cuBenchGPT2(t, g, B, 1024, steps))
	}
	fmt.Println("goddp GPT-2 124M", cuBenchDType(t), "AdamW on", g.DeviceName())
	for _, r := range rows {
		fmt.Println(r) // RESULT goddp[-bf16] batch T tokens/s step-ms peak-GiB
	}
}

func cuBenchGPT2(t *testing.T, g *cuda.Device, B, T, steps int) string {
	cfg := GPTConfig{Layers: 12, Width: 768, Heads: 12, Context: 1024, Vocab: 50304, Tied: true, Compute: cuBenchDType(t)}
	if s := os.Getenv("GODDP_ATTENTION"); s != "" { // auto (flash on this device), flash or materialized
		var err error
		if cfg.Attention, err = ParseAttentionMode(s); err != nil {
			t.Fatal(err)
		}
	}
	if s := os.Getenv("GODDP_CKPT"); s != "" {
		fmt.Sscan(s, &cfg.Checkpoint)
	}
	cfg.CheckpointKeepAttn = os.Getenv("GODDP_CKPT_KEEP") != ""
	cfg.GemmEpilogue = os.Getenv("GODDP_GEMM_EPILOGUE") != "" // bias, GELU and bias gradients in cublasLt's epilogues
	if s := os.Getenv("GODDP_LOSS_CHUNK"); s != "" {          // rows of logits the head holds at a time (default ~384 MiB on a GPU)
		fmt.Sscan(s, &cfg.LossChunk)
	}
	flashRows := 64 // GODDP_FLASH_ROWS=128: model.flash_forward_rows
	if s := os.Getenv("GODDP_FLASH_ROWS"); s != "" {
		fmt.Sscan(s, &flashRows)
	}
	if err := g.SetFlashForwardRows(flashRows); err != nil {
		t.Fatal(err)
	}
	defer g.SetFlashForwardRows(64)
	t.Logf("attention %s, checkpoint every %d (keep attention %v), gemm epilogue %v, flash forward rows %d, loss chunk %d rows (0: the default)",
		cfg.Attention, cfg.Checkpoint, cfg.CheckpointKeepAttn, cfg.GemmEpilogue, flashRows, cfg.LossChunk)
	g.EmptyCache()
	base := g.Stats().Allocated
	m, err := NewGPT(g, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := NewAdamW(m.Params(), AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	scfg := DefaultScaler()
	if cfg.Compute == tensor.BF16 { // as the trainer does under bf16: no loss scaling, inf/NaN checked
		scfg = ScalerConfig{CheckFinite: true}
	}
	sc, _ := NewScaler(g, scfg)
	r := rand.New(rand.NewPCG(1, 1))
	tok, tg := make([]int32, B*T), make([]int32, B*T)
	for i := range tok {
		tok[i] = int32(r.IntN(50257))
		tg[i] = int32(r.IntN(50257))
	}
	x, y := g.Alloc(tensor.I32, "tokens", B, T), g.Alloc(tensor.I32, "targets", B, T)
	g.UploadI32(x, tok)
	g.UploadI32(y, tg)
	in := Inputs{Tokens: x, Targets: y, Valid: B * T}
	unfused := os.Getenv("GODDP_UNFUSED_HEAD") != "" // recompute the logits in backward instead
	step := func() float32 {
		m.Params().ZeroGrad()
		if !unfused {
			in.GradScale = sc.Scale() // the head's backward inside the forward, as the trainer does
		}
		loss := m.Forward(in, true)
		m.Backward(sc.Scale())
		if _, err := sc.Step(m.Params(), opt, 6e-4); err != nil { // waits on the inf flag
			t.Fatal(err)
		}
		return tensor.ToHost(loss)[0]
	}
	for i := 0; i < 3; i++ { // warm-up: kernel load, cuBLAS heuristics, the allocator's cache
		step()
	}
	if os.Getenv("GODDP_PROFILE") != "" {
		g.Sync()
		g.ProfileStart()
		step()
		fmt.Printf("profile of one step at B=%d (events around each kernel):\n%s", B, g.ProfileStop())
	}
	g.Sync()
	g.ResetPeak()
	times := make([]float64, steps)
	var loss float32
	for i := range times {
		t0 := time.Now()
		loss = step()
		times[i] = float64(time.Since(t0).Microseconds()) / 1000
	}
	med := cuMedian(times)
	peak := g.Stats().Peak - base
	_, total := g.MemInfo()
	t.Logf("B=%d: median step %.1f ms, loss %.3f, peak allocated %s of %s, reserved %s", B, med, loss,
		tensor.FormatBytes(peak), tensor.FormatBytes(total), tensor.FormatBytes(g.Stats().Reserved))
	g.Free(x)
	g.Free(y)
	opt.Free()
	sc.Free()
	m.Free()
	g.EmptyCache()
	name := "goddp"
	if cfg.Compute == tensor.BF16 {
		name = "goddp-bf16"
	}
	return fmt.Sprintf("RESULT %s %d %d %.0f %.2f %.2f", name, B, T, float64(B*T)/(med/1000), med, float64(peak)/(1<<30))
}

// cuBenchDType is GODDP_BENCH_DTYPE: the bench's compute dtype, fp16 (default, AMP with the loss
// scaler) or bf16 (no loss scaling; scripts/bench-gpu-vs-pytorch.sh DTYPE=bf16).
func cuBenchDType(t *testing.T) tensor.DType {
	switch s := os.Getenv("GODDP_BENCH_DTYPE"); s {
	case "", "fp16":
		return tensor.F16
	case "bf16":
		return tensor.BF16
	default:
		t.Fatalf("GODDP_BENCH_DTYPE=%q: want fp16 or bf16", s)
		return 0
	}
}

func cuMedian(x []float64) float64 {
	s := append([]float64(nil), x...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// A GPT with head size 64 trains the same on the GPU through the fused attention as on the CPU
// through the materialised one (loss and every gradient to f16 rounding); with checkpointing on
// the GPU the gradients are unchanged.
func TestCUDA_gptFlashMatchesCPU(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.F16) {
		t.Skipf("no fused attention on %s", g.DeviceName())
	}
	base := g.Stats().Allocated
	cfg := GPTConfig{Layers: 2, Width: 128, Heads: 2, Context: 160, Vocab: 97, Tied: true, Compute: tensor.F16}
	type result struct {
		loss  float32
		grads []float32
		m     *GPT
	}
	run := func(dev tensor.Device, mode AttentionMode, ckpt int) result {
		c := cfg
		c.Attention, c.Checkpoint = mode, ckpt
		m, err := NewGPT(dev, c, 7)
		if err != nil {
			t.Fatal(err)
		}
		in := cuGPTInputs(dev, rand.New(rand.NewPCG(1, 2)), 3, 150, cfg.Vocab)
		m.Params().ZeroGrad()
		loss := tensor.ToHost(m.Forward(in, true))[0]
		if ckpt == 0 && (m.acts[0].Attn.QKV != nil) != (mode != AttnMaterialized) {
			t.Fatalf("%s: mode %s took the other path", dev.Name(), mode)
		}
		m.Backward(1)
		r := result{loss, tensor.ToHost(m.Params().Grad), m}
		dev.Free(in.Tokens)
		dev.Free(in.Targets)
		return r
	}
	ref := run(cpu.New(), AttnMaterialized, 0)
	gf := run(g, AttnAuto, 0)
	gc := run(g, AttnAuto, 1)
	if e := math.Abs(float64(gf.loss-ref.loss)) / math.Abs(float64(ref.loss)); !(e <= 1e-2) {
		t.Errorf("loss GPU flash %v, CPU %v", gf.loss, ref.loss)
	}
	identical := true
	for _, p := range ref.m.Params().List {
		n := tensor.Numel(p.Shape)
		want, got, ck := ref.grads[p.Offset:p.Offset+n], gf.grads[p.Offset:p.Offset+n], gc.grads[p.Offset:p.Offset+n]
		if e := relNorm(got, want); !(e <= 0.1) {
			t.Errorf("gradient of %s: GPU flash vs CPU relative error %g > 0.1", p.Name, e)
		}
		if e := relNorm(ck, got); !(e <= 1e-3) {
			t.Errorf("gradient of %s: GPU flash with checkpointing vs without: relative error %g > 1e-3", p.Name, e)
		}
		for j := range got {
			if got[j] != ck[j] {
				identical = false
			}
		}
	}
	t.Logf("checkpointed gradients bit-identical to the plain run: %v", identical)
	ref.m.Free()
	gf.m.Free()
	gc.m.Free()
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after freeing the models, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}
