package config

import (
	"path/filepath"
	"slices"
	"testing"
)

// The hashes of a few configs as the builds before the trajectory config computed them
// (worker.Config.Hash at 2bca02f, config.Config.Hash up to c094bc3): HashV1 still computes them,
// so a checkpoint those builds wrote (a hash, no trajectory config) resumes under this one when
// its config is the same. HashV1 is frozen: a change here breaks those checkpoints.
func TestHashV1_stableAcrossBuilds(t *testing.T) {
	type tc struct {
		name  string
		path  string // "" = minimalMLP
		sets  []string
		world int // 0 = hash before the batch is resolved
		want  string
	}
	ship := func(n string) string { return filepath.Join("..", "..", "configs", n) }
	variety := []string{"model.attention=flash", "precision=fp16", "ddp.wire=f16", "model.checkpoint=every_2",
		"train.schedule=cosine", "train.optimizer=sgd", "train.momentum=0.9", "train.micro_batch=auto",
		"train.global_batch=256", "train.memory_budget=1GiB"}
	for _, c := range []tc{
		{name: "minimal", want: "7947e0b4ec377f1cdd6105307da05651acb546d5284404ae3833f03d6ad90b0b"},
		{name: "minimal world 2", world: 2, want: "867d11b7f6c71016eaf1891f9942cb15e7212a409c9518715c2001a95416f6d2"},
		{name: "mnist-mlp", path: ship("mnist-mlp.yaml"), want: "1a062f2acf8704e5e0ec5c0fa8650c8014a3c41764a5a4a433d9ede6ba50a44f"},
		{name: "mnist-mlp world 2", path: ship("mnist-mlp.yaml"), world: 2, want: "bd7ec4bf08829410226a40d1b0ef704e7428469295007ae3ca78ebbce0630838"},
		{name: "opticks", path: ship("opticks-gpt-tiny.yaml"), want: "204017d8b9a365b306eb5c615e01dab87ff82838e761d0f01b41f40712a7faca"},
		{name: "opticks world 2", path: ship("opticks-gpt-tiny.yaml"), world: 2, want: "ea88c268b01284c3ec6fa3301c94e7fbd57189a41b301f62f48e6ceb1058e695"},
		// The file itself changed in issue 18 (data.kind tokens, model.vocab_used 50257): these two
		// pins are new (were 211cc5fc… and 681eaada…); every other pin, and so the format, is as it was.
		{name: "gpt2-124m", path: ship("gpt2-124m.yaml"), want: "9c3cc31b58f6fe3fd07ad872a49e50aebaa9fcc8904452a2f9a3fe29d40ff59c"},
		{name: "gpt2-124m world 2", path: ship("gpt2-124m.yaml"), world: 2, want: "1a4be08b6ecc6e7425600d2e5a66c6b181e32fe86559144ad417d9b4edb78247"},
		{name: "every choice set", sets: variety, want: "421b2c5a51a174a9d6249292e96d6a600ec457441827ea5798ec75509be766d6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = writeYAML(t, minimalMLP)
			}
			cfg, err := Load(path, c.sets)
			if err != nil {
				t.Fatal(err)
			}
			if c.world > 0 {
				b, err := cfg.Train.ResolveBatch(c.world)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Train = cfg.Train.WithBatch(b)
			}
			if got := cfg.HashV1(); got != c.want {
				t.Errorf("HashV1 = %s, the earlier build's %s\n%s", got, c.want, cfg.YAML())
			}
		})
	}
}

// The trajectory hashes of a few configs, pinned: ranks and hosts of different builds agree at the
// rendezvous, and this build's checkpoints resume under the next, only while these hold. A change
// here is a format change (bump TrajectoryFormat and say so).
//
// Re-pinned once on the day the format was introduced, before any build with it left the tree:
// model.vocab_used (issue 18) and the resnet keys (issue 21) joined the trajectory when the
// branches merged.
func TestHash_pinned(t *testing.T) {
	ship := func(n string) string { return filepath.Join("..", "..", "configs", n) }
	for _, c := range []struct {
		name, path string
		world      int
		want       string
	}{
		{"minimal", "", 0, "3cbd53500660162f496f5a8919376009a2be3210b124028b05111500d834d512"},
		{"mnist-mlp", ship("mnist-mlp.yaml"), 0, "024fe319f017d429259e9d2b412cafeea599c61df662421a9fb15a73873f991e"},
		{"mnist-mlp world 2", ship("mnist-mlp.yaml"), 2, "037f3173e81309ee0a9ac64eb67366435a1bed2b77abb99ffff073d7f956831e"},
		{"opticks", ship("opticks-gpt-tiny.yaml"), 0, "8f24ab4795dff9161f1550823ed4c9a36c45b8fd3355afa8c69acefd574d891d"},
		{"opticks world 2", ship("opticks-gpt-tiny.yaml"), 2, "b77bc03cae87cf82aae5a5b51550ecdb6ded4032ba9f2a9a70b85f9c34eee48b"},
		{"gpt2-124m", ship("gpt2-124m.yaml"), 0, "8340338f44751a02c83f4eddcce29d74500d5e89673f5070b8eb6b15e596b66b"},
		{"gpt2-124m world 2", ship("gpt2-124m.yaml"), 2, "b23520d2c5e9df9036d2420735e3cde2e6f2a1f1b143a53b3e2edb7fb54bf925"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = writeYAML(t, minimalMLP)
			}
			cfg, err := Load(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.world > 0 {
				b, err := cfg.Train.ResolveBatch(c.world)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Train = cfg.Train.WithBatch(b)
			}
			if got := cfg.Hash(); got != c.want {
				t.Errorf("Hash = %s, pinned %s\n%v", got, c.want, cfg.Trajectory())
			}
		})
	}
}

func TestHash_doesNotChangeTheConfig(t *testing.T) {
	c, err := Load(writeYAML(t, minimalMLP), []string{"checkpoint.dir=/ck", "train.memory_budget=1GiB", "train.global_batch=128"})
	if err != nil {
		t.Fatal(err)
	}
	before := c.YAML()
	c.Hash()
	if after := c.YAML(); after != before {
		t.Errorf("Hash changed the config:\n%s\nbecame\n%s", before, after)
	}
}

// Every key of the schema is classified: part of the trajectory (changing it changes Hash), left
// out of it (hash.go's notTrajectory: changing it changes nothing), or part of it only under a
// condition (both, depending on the other keys). A key added to Config without a line here or in
// notTrajectory fails this test.
func TestHash_everyKeyIsClassified(t *testing.T) {
	// The trajectory keys, each with a value unlike minimalMLP's.
	trajectory := map[string]string{
		"precision": "fp16", "seed": "2",
		"model.kind": "gpt", "model.widths": "[784,64,10]", "model.activation": "gelu", "model.layers": "3",
		"model.width": "64", "model.heads": "2", "model.context": "16", "model.vocab": "256", "model.tied": "false",
		"model.dropout": "0.1", "model.attention": "flash", "model.vocab_used": "250", "model.gemm_epilogue": "true",
		"model.depth": "34", "model.stem": "small", "model.classes": "7", "model.sync_batchnorm": "true",
		"train.micro_batch": "32", "train.global_batch": "256", "train.lr": "0.02", "train.schedule": "cosine",
		"train.optimizer": "sgd", "train.weight_decay": "0.1", "train.momentum": "0.9", "train.nesterov": "true",
		"train.beta1": "0.8", "train.beta2": "0.95", "train.eps": "1e-6", "train.grad_clip": "1",
		"data.kind": "text", "data.eval_fraction": "0.2", "data.shuffle": "false",
		"data.image_size": "32", "data.mean": "[0.5,0.5,0.5]", "data.std": "[0.2,0.2,0.2]",
		"data.synthetic_pool": "64", "ddp.bucket_cap_mb": "1", "ddp.wire": "f16", "ddp.hierarchical": "true",
		"loss_scale.init": "1024", "loss_scale.growth_interval": "100", "loss_scale.growth_factor": "4",
		"loss_scale.backoff": "0.25", "loss_scale.min": "2",
	}
	// notTrajectory's keys, each with a value unlike minimalMLP's.
	unhashed := map[string]string{
		"data.path": "/elsewhere", "data.workers": "7", "data.prefetch": "9", "data.upload_ahead": "on",
		"checkpoint.dir": "/ck", "checkpoint.every": "5", "checkpoint.keep": "9", "checkpoint.per_host": "true",
		"ddp.check_every": "7", "ddp.channels": "3", "ddp.shard_optimizer": "true", "ddp.timeout": "5m", "ddp.intra_host": "host",
		"ddp.overlap_gather": "off", "ddp.shard_master": "off", "ddp.shard_gather": "host", "ddp.shard_reduce": "host", "train.log_every": "3", "train.eval_every": "7", "train.eval_batches": "3", "train.memory_budget": "1GiB",
		"model.checkpoint": "blocks", "model.checkpoint_keep_attention": "true", "model.layout": "nhwc", "metrics.listen": ":9100",
		"model.init_from": "/somewhere/model.safetensors", "checkpoint.fresh_if_broken": "true",
		"model.flash_forward_rows": "128",
	}
	// notTrajectory's conditional keys: a value, and the sets that make the key count (on) and not
	// count (off).
	conditional := map[string]struct {
		value   string
		on, off []string
	}{
		"train.grad_accum_steps": {"4", nil, []string{"train.global_batch=128"}},
		"train.epochs":           {"5", []string{"train.schedule=cosine"}, nil},
		"train.max_steps":        {"100", []string{"train.schedule=cosine"}, nil},
		"train.warmup_steps":     {"10", []string{"train.schedule=cosine"}, nil},
		"train.min_lr":           {"0.0005", []string{"train.schedule=cosine"}, nil},
	}
	always, cond := NotTrajectoryKeys()
	for _, k := range always {
		if _, ok := unhashed[k]; !ok {
			t.Errorf("notTrajectory has %s: give it a value in this test's unhashed table", k)
		}
		if _, ok := trajectory[k]; ok {
			t.Errorf("%s is in notTrajectory and in this test's trajectory keys", k)
		}
	}
	for _, k := range cond {
		if _, ok := conditional[k]; !ok {
			t.Errorf("notTrajectory has %s with a condition: give it a line in this test's conditional table", k)
		}
	}
	load := func(sets ...string) *Config {
		t.Helper()
		c, err := Load(writeYAML(t, minimalMLP), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if err := c.Set(s); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	known := map[string]bool{}
	for _, key := range Keys() {
		known[key] = true
		t.Run(key, func(t *testing.T) {
			if v, ok := trajectory[key]; ok {
				base := load()
				if base.Hash() == load(key+"="+v).Hash() {
					t.Errorf("%s=%s does not change Hash, but the trajectory depends on it", key, v)
				}
				d := DiffTrajectory(base.Trajectory(), load(key+"="+v).Trajectory())
				if !slices.ContainsFunc(d, func(d KeyDiff) bool { return d.Key == key }) {
					t.Errorf("DiffTrajectory of %s=%s does not name it: %v", key, v, d)
				}
				return
			}
			if v, ok := unhashed[key]; ok {
				if load().Hash() != load(key+"="+v).Hash() {
					t.Errorf("%s=%s changes Hash, but it is in notTrajectory", key, v)
				}
				return
			}
			if c, ok := conditional[key]; ok {
				if load(c.on...).Hash() == load(append(c.on, key+"="+c.value)...).Hash() {
					t.Errorf("%s=%s with %v does not change Hash", key, c.value, c.on)
				}
				if load(c.off...).Hash() != load(append(c.off, key+"="+c.value)...).Hash() {
					t.Errorf("%s=%s with %v changes Hash, but the key is not used then", key, c.value, c.off)
				}
				if got := load(c.off...).Trajectory()[key]; got != NotUsed {
					t.Errorf("Trajectory()[%s] with %v = %q, want %q", key, c.off, got, NotUsed)
				}
				return
			}
			t.Errorf("key %s is not classified: add it to notTrajectory (hash.go) with why the trajectory does not depend on it, "+
				"or to this test's trajectory keys", key)
		})
	}
	for _, m := range []map[string]string{trajectory, unhashed} {
		for k := range m {
			if !known[k] {
				t.Errorf("this test names %s, which is not a key (config.Keys)", k)
			}
		}
	}
}

// The trajectory config's values are written as YAML would, in canonical spelling, without
// float32 noise and with no host-local key.
func TestTrajectory_values(t *testing.T) {
	c, err := Load(writeYAML(t, minimalMLP), []string{"train.lr=0.003", "model.attention=", "train.schedule=cosine"})
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Trajectory()
	for k, want := range map[string]string{
		"train.lr": "0.003", "train.min_lr": "0.0003", "model.widths": "[784, 32, 10]", "train.micro_batch": "64",
		"model.attention": "auto", "train.eps": "1e-08", "seed": "1", "model.tied": "true", "train.global_batch": "0",
		"train.grad_accum_steps": "0",
	} {
		if tr[k] != want {
			t.Errorf("Trajectory()[%s] = %q, want %q", k, tr[k], want)
		}
	}
	for _, k := range []string{"data.path", "checkpoint.dir", "train.log_every", "metrics.listen"} {
		if v, ok := tr[k]; ok {
			t.Errorf("Trajectory has %s = %q", k, v)
		}
	}
	c.Train.MicroBatchAuto = true
	if got := c.Trajectory()["train.micro_batch"]; got != "auto" {
		t.Errorf("micro_batch auto is %q in the trajectory", got)
	}
	if c.Hash() != TrajectoryHash(c.Trajectory()) {
		t.Error("Hash is not TrajectoryHash(Trajectory)")
	}
}

// DiffTrajectory names every key that differs, in Keys order; a key the old config lacks (a
// checkpoint from before the key existed) counts as this build's default; a key only the old one
// has (one this build leaves out of the trajectory) is ignored.
func TestDiffTrajectory(t *testing.T) {
	a, err := Load(writeYAML(t, minimalMLP), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(writeYAML(t, minimalMLP), []string{"train.lr=0.001", "seed=7", "checkpoint.keep=5"})
	if err != nil {
		t.Fatal(err)
	}
	d := DiffTrajectory(a.Trajectory(), b.Trajectory())
	if len(d) != 2 || d[0] != (KeyDiff{"seed", "1", "7"}) || d[1] != (KeyDiff{"train.lr", "0.01", "0.001"}) {
		t.Errorf("diff = %+v, want seed 1→7 and train.lr 0.01→0.001", d)
	}
	old := a.Trajectory()
	delete(old, "loss_scale.min") // written before the key existed: its default is assumed
	old["model.init_from"] = "/gone.safetensors"
	if d := DiffTrajectory(old, a.Trajectory()); len(d) != 0 {
		t.Errorf("diff = %+v, want none", d)
	}
	a.LossScale.Min = 2
	if d := DiffTrajectory(old, a.Trajectory()); len(d) != 1 || d[0] != (KeyDiff{"loss_scale.min", "1", "2"}) {
		t.Errorf("diff = %+v, want loss_scale.min 1 (the default) → 2", d)
	}
}

// model.init_from and checkpoint.fresh_if_broken are not part of the hash: a checkpoint's weights
// supersede init_from, and a resume must not be refused because the file moved (hash.go).
// model.vocab_used is: it changes which shards are accepted and what an export holds.
func TestHash_leavesOutInitFrom(t *testing.T) {
	base, err := Load(writeYAML(t, minimalMLP), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"model.init_from=/somewhere/model.safetensors", "checkpoint.fresh_if_broken=true"} {
		c, err := Load(writeYAML(t, minimalMLP), []string{set})
		if err != nil {
			t.Fatal(err)
		}
		if c.Hash() != base.Hash() {
			t.Errorf("%s changed the hash", set)
		}
	}
	gpt := []string{"model.kind=gpt", "model.layers=1", "model.width=8", "model.heads=2", "model.context=4", "model.vocab=300", "data.kind=text"}
	a, err := Load(writeYAML(t, minimalMLP), gpt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(writeYAML(t, minimalMLP), append(gpt, "model.vocab_used=260"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() == b.Hash() {
		t.Error("model.vocab_used is not in the hash")
	}
}
