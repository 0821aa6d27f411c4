package worker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/observe"
)

// precision bf16 builds a model computing in bf16 (a bf16 weight copy beside the f32 master
// weights), a scaler that never scales but checks, and the bf16 wire by default.
func TestBF16_buildsBF16(t *testing.T) {
	cfg := tinyGPT(t, "precision=bf16", "train.micro_batch=4")
	if computeDType(cfg) != tensor.BF16 || wireOf(cfg).String() != "bf16" {
		t.Fatalf("compute %s, wire %s", computeDType(cfg), wireOf(cfg))
	}
	dev := cpu.New()
	m, err := buildModel(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	if ps.Half == nil || ps.Half.DType() != tensor.BF16 || ps.Data.DType() != tensor.F32 || ps.Grad.DType() != tensor.F32 {
		t.Fatalf("params: half %v, data %s, grad %s", ps.Half, ps.Data.DType(), ps.Grad.DType())
	}
	sc, err := buildScaler(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Free()
	if sc.Cfg.Enabled || !sc.Checks() || sc.Scale() != 1 {
		t.Fatalf("scaler under bf16: %+v, scale %g", sc.Cfg, sc.Scale())
	}
	opt, err := buildOptimizer(cfg, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	if r := observe.MemoryReport(dev, ps, opt); !strings.Contains(r, "parameters (bf16 compute copy)") || !strings.Contains(r, "master weights (f32)") {
		t.Errorf("memory report under bf16:\n%s", r)
	}
}

// No loss scaler under bf16: an inf gradient is an error that names the step and the rank, not
// a skipped step.
func TestBF16_infGradientNamesTheStep(t *testing.T) {
	cfg := tinyGPT(t, "precision=bf16", "train.micro_batch=4", "train.max_steps=4")
	_, err := Run(context.Background(), cfg, Options{Logger: quiet(), InjectInf: func(step int) bool { return step == 2 }})
	if err == nil {
		t.Fatal("a bf16 run with an inf gradient at step 2 finished")
	}
	if !errors.Is(err, model.ErrNonFinite) || !strings.Contains(err.Error(), "step 2: inf or NaN gradient") || !strings.Contains(err.Error(), "on rank [0]") {
		t.Fatalf("error %q does not name step 2 and rank 0", err)
	}
	// fp16 skips the same step and finishes.
	res, err := Run(context.Background(), tinyGPT(t, "precision=fp16", "train.micro_batch=4", "train.max_steps=4"),
		Options{Logger: quiet(), InjectInf: func(step int) bool { return step == 2 }})
	if err != nil || res.SkippedSteps != 1 {
		t.Fatalf("fp16 with an inf at step 2: %v, skipped %v", err, res)
	}
}

// A bf16 run resumes exactly: stopped after step 2 and resumed, it ends where the uninterrupted
// run ends. Its checkpoints refuse an fp16 resume, naming precision.
func TestBF16_resumeIsExactAndRefusesFP16(t *testing.T) {
	straight := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "a"), "precision=bf16"), Options{})
	dir := filepath.Join(t.TempDir(), "b")
	mustRun(t, resumable(t, dir, "precision=bf16", "train.max_steps=2"), Options{})
	res := mustRun(t, resumable(t, dir, "precision=bf16"), Options{})
	if res.ParamSHA256 != straight.ParamSHA256 || res.Steps != 4 {
		t.Errorf("resumed bf16 run ends with %s after %d steps, uninterrupted %s", res.ParamSHA256, res.Steps, straight.ParamSHA256)
	}
	fp16 := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "c"), "precision=fp16"), Options{})
	if fp16.ParamSHA256 == straight.ParamSHA256 {
		t.Error("bf16 and fp16 runs end with the same weights")
	}
	_, err := New(context.Background(), resumable(t, dir, "precision=fp16"), Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "precision=bf16, this run has precision=fp16") {
		t.Fatalf("an fp16 resume of a bf16 checkpoint: %v", err)
	}
}

// micro_batch auto searches under bf16 too, and the batch it finds fits the budget.
func TestBF16_autoBatch(t *testing.T) {
	cfg := tinyGPT(t, "precision=bf16", "train.micro_batch=auto", "train.global_batch=8", "train.memory_budget=12MiB", "train.max_steps=1")
	res := mustRun(t, cfg, Options{})
	if res.Steps != 1 || res.PeakMemoryBytes > 12<<20 {
		t.Fatalf("auto batch under bf16: %d steps, peak %d", res.Steps, res.PeakMemoryBytes)
	}
}
