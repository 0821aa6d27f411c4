package config

import (
	"path/filepath"
	"testing"
)

// The hashes of a few configs as the build before this package computed them (worker.Config.Hash
// at 2bca02f): a checkpoint written by that build resumes under this one, and hosts running
// either agree at the rendezvous. A change here is a format change: say so, as with
// CheckpointFormat.
func TestHash_stableAcrossBuilds(t *testing.T) {
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
			if got := cfg.Hash(); got != c.want {
				t.Errorf("Hash = %s, the earlier build's %s\n%s", got, c.want, cfg.YAML())
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
