package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimalMLP = `
model:
  kind: mlp
  widths: [784, 32, 10]
train:
  epochs: 1
  micro_batch: 64
  lr: 0.01
data:
  kind: mnist
  path: /nonexistent/mnist
`

// Every shipped config loads and its batch resolves. (That data.path's default is found is
// worker's TestConfig_shipConfigsLoad: this package leaves data.path as written.)
func TestConfig_shipConfigsLoad(t *testing.T) {
	for _, name := range []string{"mnist-mlp.yaml", "opticks-gpt-tiny.yaml", "gpt2-124m.yaml", "opticks-gpt2-bpe.yaml"} {
		t.Run(name, func(t *testing.T) {
			c, err := Load(filepath.Join("..", "..", "configs", name), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Train.ResolveBatch(1); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConfig_defaultsAndDerived(t *testing.T) {
	c, err := Load(writeYAML(t, minimalMLP), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Precision != "fp32" || c.Seed != 1 || !c.Model.Tied || c.Model.Activation != "relu" {
		t.Errorf("top/model defaults: %+v %+v", c.Precision, c.Model)
	}
	if c.Train.MinLR != 0.001 {
		t.Errorf("min_lr default = %g, want lr/10 = 0.001", c.Train.MinLR)
	}
	if c.Train.Beta1 != 0.9 || c.Train.Beta2 != 0.999 || c.Train.Eps != 1e-8 {
		t.Errorf("adam defaults: %+v", c.Train)
	}
	if c.Data.Workers != 2 || c.Data.Prefetch != 4 || c.Data.EvalFraction != 0.1 || !c.Data.Shuffle {
		t.Errorf("data defaults: %+v", c.Data)
	}
	if c.Checkpoint.Keep != 2 || c.DDP.BucketCapMB != 25 || c.DDP.CheckEvery != 100 || c.WireFormat() != WireF32 {
		t.Errorf("checkpoint/ddp defaults: %+v %+v", c.Checkpoint, c.DDP)
	}
	ls := c.LossScale
	if ls.Init != 65536 || ls.GrowthInterval != 2000 || ls.GrowthFactor != 2 || ls.Backoff != 0.5 || ls.Min != 1 {
		t.Errorf("loss_scale defaults: %+v", ls)
	}
	// --set lr after the file: min_lr follows the new lr.
	c, err = Load(writeYAML(t, minimalMLP), []string{"train.lr=0.1", "precision=fp16"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Train.MinLR != 0.01 || c.WireFormat() != WireF16 {
		t.Errorf("min_lr = %g wire %s after --set, want 0.01 f16", c.Train.MinLR, c.WireFormat())
	}
}

// precision bf16: the wire follows it (auto is bf16), an explicit wire wins (bf16 under fp32 too,
// as f16 is), and the trajectory tells a bf16 run from an fp16 one by precision and ddp.wire.
func TestConfig_bf16(t *testing.T) {
	load := func(sets ...string) *Config {
		t.Helper()
		c, err := Load(writeYAML(t, minimalMLP), sets)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	bf, fp := load("precision=bf16"), load("precision=fp16")
	if bf.Precision != BF16 || bf.WireFormat() != WireBF16 {
		t.Errorf("precision bf16: %s, wire %s", bf.Precision, bf.WireFormat())
	}
	for _, c := range []struct {
		sets []string
		want Wire
	}{{[]string{"precision=bf16", "ddp.wire=f32"}, WireF32}, {[]string{"precision=fp32", "ddp.wire=bf16"}, WireBF16},
		{[]string{"precision=fp16", "ddp.wire=bf16"}, WireBF16}, {[]string{"precision=bf16", "ddp.wire=f16"}, WireF16}} {
		if got := load(c.sets...).WireFormat(); got != c.want {
			t.Errorf("%v: wire %s, want %s", c.sets, got, c.want)
		}
	}
	tb, tf := bf.Trajectory(), fp.Trajectory()
	if tb["precision"] != "bf16" || tb["ddp.wire"] != "bf16" || tf["precision"] != "fp16" || tf["ddp.wire"] != "f16" {
		t.Errorf("trajectories: bf16 %s/%s, fp16 %s/%s", tb["precision"], tb["ddp.wire"], tf["precision"], tf["ddp.wire"])
	}
	if bf.Hash() == fp.Hash() {
		t.Error("a bf16 run hashes as an fp16 one")
	}
	if bf16Auto, bf16Set := load("precision=bf16"), load("precision=bf16", "ddp.wire=bf16"); bf16Auto.Hash() != bf16Set.Hash() {
		t.Error("ddp.wire auto and bf16 under precision bf16 hash differently: the same arithmetic")
	}
}

func TestConfig_unknownKey(t *testing.T) {
	p := writeYAML(t, minimalMLP+"  shuffel: false\n")
	_, err := Load(p, nil)
	if err == nil {
		t.Fatal("unknown key accepted")
	}
	for _, want := range []string{`"shuffel"`, p + ":12", "data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// Unknown inside train: (decoded by a custom unmarshaler) is also caught.
	p = writeYAML(t, strings.Replace(minimalMLP, "  lr: 0.01", "  lr_rate: 0.01", 1))
	if _, err = Load(p, nil); err == nil || !strings.Contains(err.Error(), `"lr_rate"`) || !strings.Contains(err.Error(), p+":8") {
		t.Errorf("unknown train key: %v", err)
	}
}

func TestConfig_badValue(t *testing.T) {
	p := writeYAML(t, strings.Replace(minimalMLP, "epochs: 1", "epochs: three", 1))
	_, err := Load(p, nil)
	if err == nil || !strings.Contains(err.Error(), "three") || !strings.Contains(err.Error(), p+":6") {
		t.Errorf("bad int: %v", err)
	}
	_, err = Load(writeYAML(t, minimalMLP), []string{"train.optimizer=adam"})
	if err == nil || !strings.Contains(err.Error(), "train.optimizer") || !strings.Contains(err.Error(), "adamw") {
		t.Errorf("bad enum: %v", err)
	}
	_, err = Load(writeYAML(t, minimalMLP), []string{"train.memory_budget=lots"})
	if err == nil || !strings.Contains(err.Error(), "train.memory_budget") {
		t.Errorf("bad size: %v", err)
	}
	_, err = Load(writeYAML(t, minimalMLP), []string{"model.widths=[784,32,9]"})
	if err == nil || !strings.Contains(err.Error(), "model.widths") {
		t.Errorf("mnist with 9 outputs: %v", err)
	}
	for _, c := range []struct{ set, want string }{
		{"model.attention=fused", `model.attention: "fused"`},
		{"model.dropout=0.1,model.attention=flash", "model.attention: flash has no attention dropout"},
		{"model.checkpoint_keep_attention=true", "model.checkpoint_keep_attention: true without checkpointing"},
		{"model.gemm_epilogue=true", "model.gemm_epilogue: true: only a gpt model"},
		{"model.flash_forward_rows=128", "model.flash_forward_rows: 128: only a gpt model has the fused attention"},
		{"model.kind=gpt,model.flash_forward_rows=96", "model.flash_forward_rows: 96: want 64 or 128"},
		{"ddp.timeout=-5s", "--set ddp.timeout: -5s: must be positive"},     // issue 30: the key, and why
		{"ddp.timeout=soon", `--set ddp.timeout: "soon" is not a duration`}, // the key
		{"train.optimizer=adam", `--set train.optimizer: "adam"`},           // named once, by the choice
	} {
		_, err = Load(writeYAML(t, minimalMLP), strings.Split(c.set, ","))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error containing %q", c.set, err, c.want)
		}
	}
}

func TestConfig_set(t *testing.T) {
	c := Default()
	for _, kv := range []string{
		"train.lr=3e-4", "model.widths=[784, 128, 10]", "data.shuffle=false",
		"train.micro_batch=auto", "train.memory_budget=512MiB", "model.checkpoint=every_2", "seed=7",
	} {
		if err := c.Set(kv); err != nil {
			t.Fatalf("Set(%q): %v", kv, err)
		}
	}
	if c.Train.LR != 3e-4 || len(c.Model.Widths) != 3 || c.Data.Shuffle || !c.Train.MicroBatchAuto || c.Seed != 7 {
		t.Errorf("after Set: %+v", c)
	}
	if n := c.Model.Checkpoint.Every; n != 2 {
		t.Errorf("Checkpoint.Every = %d", n)
	}
	if err := c.Set("train.micro_batch=64"); err != nil || c.Train.MicroBatch != 64 || c.Train.MicroBatchAuto {
		t.Errorf("micro_batch=64: %v %+v", err, c.Train)
	}
	cases := map[string][]string{
		"train.lrr=1":          {"train.lrr", "unknown key"},
		"train=1":              {`"train"`, "unknown key"},
		"train.epochs=many":    {"train.epochs", `"many"`, "integer"},
		"train.lr=fast":        {"train.lr", `"fast"`, "number"},
		"data.shuffle=maybe":   {"data.shuffle", "true or false"},
		"train.micro_batch=-x": {"train.micro_batch", "auto"},
		"novalue":              {"key.path=value"},
	}
	for kv, wants := range cases {
		err := c.Set(kv)
		if err == nil {
			t.Errorf("Set(%q) accepted", kv)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Set(%q) = %q, missing %q", kv, err, w)
			}
		}
	}
}

func TestConfig_microBatchAutoYAML(t *testing.T) {
	c, err := Load(writeYAML(t, strings.Replace(minimalMLP, "micro_batch: 64", "micro_batch: auto\n  global_batch: 256\n  memory_budget: 16GiB", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Train.MicroBatchAuto || c.Train.MicroBatch != 0 || c.Train.MemoryBudget.Bytes != 16<<30 {
		t.Errorf("auto: %+v", c.Train)
	}
	if _, err := c.Train.ResolveBatch(2); err == nil || !strings.Contains(err.Error(), "auto") {
		t.Errorf("ResolveBatch before the search: %v", err)
	}
	b, err := c.Train.ResolveAutoBatch(32, 2) // the search's answer
	if err != nil || b.Accum != 4 {
		t.Errorf("after search: %v %+v", err, b)
	}
	c.Train = c.Train.WithBatch(b)
	if !strings.Contains(c.YAML(), "micro_batch: auto") {
		t.Errorf("YAML lost auto:\n%s", c.YAML())
	}
}

func TestConfig_ResolveBatch(t *testing.T) {
	type tc struct {
		b, k, g, world int
		wantB, wantK   int
		wantG          int
		errHas         string
	}
	for _, x := range []tc{
		{b: 32, world: 2, wantB: 32, wantK: 1, wantG: 64},
		{b: 32, k: 4, world: 2, wantB: 32, wantK: 4, wantG: 256},
		{b: 32, g: 256, world: 2, wantB: 32, wantK: 4, wantG: 256},
		{k: 2, g: 256, world: 4, wantB: 32, wantK: 2, wantG: 256},
		{g: 256, world: 4, wantB: 64, wantK: 1, wantG: 256},
		{b: 32, k: 4, g: 256, world: 2, wantB: 32, wantK: 4, wantG: 256},
		{b: 32, k: 4, g: 200, world: 2, errHas: "inconsistent"},
		{b: 30, g: 256, world: 2, errHas: "not divisible"},
		{k: 3, g: 256, world: 2, errHas: "not divisible"},
		{world: 2, errHas: "give two"},
	} {
		c := Default()
		c.Train.MicroBatch, c.Train.GradAccumSteps, c.Train.GlobalBatch = x.b, x.k, x.g
		got, err := c.Train.ResolveBatch(x.world)
		if x.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), x.errHas) {
				t.Errorf("%+v: err %v, want %q", x, err, x.errHas)
			}
			if err != nil {
				for _, key := range []string{"train.micro_batch", "train.grad_accum_steps", "train.global_batch"} {
					if !strings.Contains(err.Error(), key) {
						t.Errorf("%+v: error %q does not name %s", x, err, key)
					}
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", x, err)
			continue
		}
		if got.Micro != x.wantB || got.Accum != x.wantK || got.Global != x.wantG || got.World != x.world {
			t.Errorf("%+v: got b=%d k=%d g=%d world %d", x, got.Micro, got.Accum, got.Global, got.World)
		}
	}
}

func TestConfig_Hash(t *testing.T) {
	a, err := Load(writeYAML(t, minimalMLP), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Load(writeYAML(t, minimalMLP), []string{"data.path=/elsewhere", "data.workers=8", "train.log_every=7"})
	if a.Hash() != b.Hash() {
		t.Error("hash changed with host-local keys")
	}
	c, _ := Load(writeYAML(t, minimalMLP), []string{"train.lr=0.02"})
	if a.Hash() == c.Hash() {
		t.Error("hash unchanged with a different lr")
	}
	if len(a.Hash()) != 64 {
		t.Errorf("hash %q", a.Hash())
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "4096": 4096, "16GiB": 16 << 30, "512MiB": 512 << 20, "1.5GB": 1.5e9, "2kib": 2048, "10B": 10} {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"lots", "-1GiB", "GiB"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

// micro_batch 0 (or negative) is refused, in the file and in --set, rather than taken for unset.
func TestConfig_microBatchZeroRefused(t *testing.T) {
	withMB := strings.Replace(minimalMLP, "micro_batch: 64", "micro_batch: 0", 1)
	if withMB == minimalMLP {
		t.Fatal("test config has no micro_batch to change")
	}
	if _, err := Load(writeYAML(t, withMB), nil); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Errorf("micro_batch: 0 in the file: %v", err)
	}
	for _, v := range []string{"0", "-4"} {
		if _, err := Load(writeYAML(t, minimalMLP), []string{"train.micro_batch=" + v}); err == nil || !strings.Contains(err.Error(), "positive") {
			t.Errorf("--set train.micro_batch=%s: %v", v, err)
		}
	}
	c, err := Load(writeYAML(t, minimalMLP), []string{"train.micro_batch=8"})
	if err != nil || c.Train.MicroBatch != 8 {
		t.Errorf("--set train.micro_batch=8: %v, %d", err, c.Train.MicroBatch)
	}
}
