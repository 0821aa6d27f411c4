package config

import (
	"errors"
	"strings"
	"testing"
)

// Every string-valued key is parsed when the file is decoded: a bad value is an error naming the
// file:line, the key and the accepted values; several bad values are reported together.
func TestChoices_parsedAtDecode(t *testing.T) {
	for _, c := range []struct {
		old, new string
		line     string
		want     []string
	}{
		{"kind: mlp", "kind: mpl", ":3:", []string{`model.kind: "mpl"`, "mlp, gpt"}},
		{"epochs: 1", "epochs: 1\n  optimizer: adam", ":7:", []string{`train.optimizer: "adam"`, "adamw, sgd"}},
		{"epochs: 1", "epochs: 1\n  schedule: linear", ":7:", []string{`train.schedule: "linear"`, "constant, cosine"}},
		{"epochs: 1", "epochs: 1\n  memory_budget: lots", ":7:", []string{"train.memory_budget", `"lots"`}},
		{"kind: mnist", "kind: imagenet", ":10:", []string{`data.kind: "imagenet"`, "mnist, text"}},
		{"kind: mlp", "kind: mlp\n  checkpoint: every_0", ":4:", []string{`model.checkpoint: "every_0"`, "every_N"}},
		{"kind: mlp", "kind: mlp\n  activation: tanh", ":4:", []string{`model.activation: "tanh"`, "relu, gelu"}},
	} {
		p := writeYAML(t, strings.Replace(minimalMLP, c.old, c.new, 1))
		_, err := Load(p, nil)
		if err == nil {
			t.Errorf("%s: accepted", c.new)
			continue
		}
		for _, w := range append(c.want, p+c.line) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.new, err, w)
			}
		}
	}
	p := writeYAML(t, "precision: fp8\n"+strings.Replace(minimalMLP, "path:", "wire: f8\n  path:", 1))
	_, err := Load(p, nil)
	for _, w := range []string{p + `:1: precision: "fp8"`, `unknown key "wire" in section data`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("two errors in one file: %v, want %q", err, w)
		}
	}
}

func TestChoices_parse(t *testing.T) {
	if a, err := ParseAttention("materialised"); err != nil || a != AttnMaterialized {
		t.Errorf("materialised: %q %v", a, err)
	}
	if a, err := ParseAttention(""); err != nil || a != "" {
		t.Errorf(`"" (auto): %q %v`, a, err)
	}
	_, err := ParseWire("f8")
	var ce *ChoiceError
	if !errors.As(err, &ce) || ce.Key != "ddp.wire" || ce.Value != "f8" || strings.Join(ce.Want, ",") != "auto,f32,f16,bf16" {
		t.Errorf("ParseWire(f8) = %#v", err)
	}
	for s, every := range map[string]int{"": 0, "none": 0, "blocks": 1, "every_1": 1, "every_3": 3} {
		c, err := ParseCheckpointing(s)
		if err != nil || c.Every != every || c.String() != s {
			t.Errorf("ParseCheckpointing(%q) = %+v (%q), %v; want every %d", s, c, c.String(), err, every)
		}
	}
	for _, s := range []string{"every_0", "every_", "some", "every_x"} {
		if _, err := ParseCheckpointing(s); err == nil {
			t.Errorf("ParseCheckpointing(%q) accepted", s)
		}
	}
	// Built in Go: written in the canonical spelling.
	for c, want := range map[Checkpointing]string{{}: "", {Every: 1}: "blocks", {Every: 4}: "every_4", CheckpointNone: "none"} {
		if c.String() != want {
			t.Errorf("%+v.String() = %q, want %q", c, c.String(), want)
		}
	}
	if b := (ByteSize{Bytes: 4096}); b.String() != "4096" {
		t.Errorf("ByteSize 4096 writes %q", b.String())
	}
}

// A choice goes through --set as through the file; its spelling is kept in the YAML.
func TestChoices_setAndYAML(t *testing.T) {
	c := Default()
	for _, kv := range []string{"precision=fp16", "model.attention=materialised", "model.checkpoint=every_1", "train.memory_budget=1.5GB", `ddp.wire="f16"`} {
		if err := c.Set(kv); err != nil {
			t.Fatalf("Set(%q): %v", kv, err)
		}
	}
	if c.Precision != FP16 || c.Model.Attention != AttnMaterialized || c.Model.Checkpoint.Every != 1 || c.Train.MemoryBudget.Bytes != 1.5e9 || c.DDP.Wire != WireF16 {
		t.Errorf("after Set: %+v %+v", c.Model, c.Train.MemoryBudget)
	}
	y := c.YAML()
	for _, want := range []string{"checkpoint: every_1", "memory_budget: 1.5GB", "attention: materialized", "wire: f16"} {
		if !strings.Contains(y, want) {
			t.Errorf("YAML lacks %q:\n%s", want, y)
		}
	}
	for kv, want := range map[string]string{
		"precision=fp8":           `precision: "fp8": want one of fp32, fp16`,
		"model.kind=cnn":          `model.kind: "cnn": want one of mlp, gpt`,
		"model.checkpoint=some":   `model.checkpoint: "some"`,
		"train.memory_budget=-1G": "train.memory_budget",
		"ddp.wire=[f16]":          "ddp.wire: value",
	} {
		if err := c.Set(kv); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set(%q) = %v, want %q", kv, err, want)
		}
	}
	if c.Precision != FP16 {
		t.Errorf("a rejected --set changed precision to %q", c.Precision)
	}
}

func TestKeys_listsValueStructsAsKeys(t *testing.T) {
	keys := strings.Join(Keys(), " ")
	for _, want := range []string{"precision", "model.checkpoint", "model.attention", "train.micro_batch", "train.memory_budget", "ddp.wire", "loss_scale.min"} {
		if !strings.Contains(" "+keys+" ", " "+want+" ") {
			t.Errorf("Keys lacks %s: %s", want, keys)
		}
	}
	if strings.Contains(keys, "model.checkpoint.") || strings.Contains(keys, "memory_budget.") {
		t.Errorf("Keys walks into a value: %s", keys)
	}
}
