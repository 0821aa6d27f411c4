package config

import (
	"strings"
	"testing"
)

// Validate changes nothing, and Resolved returns a new config leaving its input as it was.
func TestValidate_isPure(t *testing.T) {
	c := Default()
	for _, kv := range []string{"model.kind=mlp", "model.widths=[784,32,10]", "train.epochs=1", "train.micro_batch=8",
		"train.lr=0.5", "data.kind=mnist", "train.memory_budget=1GiB"} {
		if err := c.Set(kv); err != nil {
			t.Fatal(err)
		}
	}
	before := c.YAML()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "train.min_lr") {
		t.Errorf("unresolved min_lr: %v", err) // -1 until Resolved
	}
	if c.YAML() != before {
		t.Errorf("Validate changed the config")
	}
	r := c.Resolved()
	if c.YAML() != before || c.Train.MinLR != minLRFromLR {
		t.Errorf("Resolved changed its input")
	}
	if r.Train.MinLR != 0.05 {
		t.Errorf("resolved min_lr %g, want lr/10", r.Train.MinLR)
	}
	r.Model.Widths[0] = 1
	if c.Model.Widths[0] != 784 {
		t.Errorf("Resolved shares model.widths with its input")
	}
	if err := r.Validate(); !strings.Contains(err.Error(), "model.widths") {
		t.Errorf("r: %v", err)
	}
}

// A Config built in Go is checked as a decoded one: its choices too.
func TestValidate_choicesBuiltInGo(t *testing.T) {
	c, err := Load(writeYAML(t, minimalMLP), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Precision, c.Train.Optimizer, c.DDP.Wire = "fp8", "lamb", ""
	err = c.Validate()
	for _, w := range []string{`precision: "fp8": want one of fp32, fp16`, `train.optimizer: "lamb"`, `ddp.wire: ""`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate = %v, want %q", err, w)
		}
	}
}

// data.kind tokens: a gpt model and a data.path; model.vocab_used at most model.vocab.
func TestValidate_tokens(t *testing.T) {
	gpt := []string{"model.kind=gpt", "model.layers=1", "model.width=8", "model.heads=2", "model.context=4", "model.vocab=64",
		"data.kind=tokens"}
	if _, err := Load(writeYAML(t, minimalMLP), append(gpt, "data.path=/shards", "model.vocab_used=50")); err != nil {
		t.Errorf("a tokens run: %v", err)
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{append(gpt, "data.path="), "data.path: empty: data.kind tokens"},
		{append(gpt, "data.path=/s", "model.vocab_used=65"), "model.vocab_used: 65"},
		{[]string{"data.kind=tokens", "data.path=/s"}, "data.kind: tokens with model.kind mlp"},
		{[]string{"model.vocab_used=5"}, "model.vocab_used: 5: only a gpt model"},
	} {
		_, err := Load(writeYAML(t, minimalMLP), c.sets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.sets, err, c.want)
		}
	}
}

// ddp.shard_optimizer shards AdamW's state and SGD's momentum: both validate.
func TestValidate_shardOptimizerAdamWAndSGD(t *testing.T) {
	c := Default()
	for _, kv := range []string{"model.kind=mlp", "model.widths=[784,32,10]", "train.epochs=1", "train.micro_batch=8",
		"train.lr=0.01", "data.kind=mnist", "ddp.shard_optimizer=true"} {
		if err := c.Set(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Resolved().Validate(); err != nil {
		t.Fatalf("adamw, sharded: %v", err)
	}
	for _, kv := range []string{"train.optimizer=sgd", "train.momentum=0.9"} {
		if err := c.Set(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Resolved().Validate(); err != nil {
		t.Fatalf("sgd, sharded: %v", err)
	}
}
