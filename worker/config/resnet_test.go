package config

import (
	"strings"
	"testing"
)

func resnetConfig(t *testing.T, kv ...string) *Config {
	t.Helper()
	c := Default()
	for _, s := range append([]string{"model.kind=resnet", "model.depth=18", "model.width=8", "model.classes=10",
		"train.epochs=1", "train.micro_batch=8", "train.lr=0.1", "data.kind=mnist"}, kv...) {
		if err := c.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	return c.Resolved()
}

// model.kind resnet: depth 18|34|50, stem imagenet|small (or unset), width and classes > 0;
// sync_batchnorm accepted; data.kind image_folder with its keys.
func TestValidate_resnet(t *testing.T) {
	if err := resnetConfig(t).Validate(); err != nil {
		t.Fatalf("a good resnet config: %v", err)
	}
	for _, s := range []string{"model.stem=small", "model.stem=imagenet", "model.depth=34", "model.depth=50", "model.sync_batchnorm=true", "model.layout=nhwc", "model.layout=nchw"} {
		if err := resnetConfig(t, s).Validate(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, kvs := range [][]string{
		{"data.kind=image_folder", "data.path=/imgs"},
		{"data.kind=image_folder", "data.path=/imgs", "data.image_size=32", "data.mean=[0.1,0.1,0.1]", "data.std=[0.3,0.3,0.3]"},
		{"data.kind=synthetic-images", "model.classes=1000", "data.synthetic_pool=256"},
	} {
		if err := resnetConfig(t, kvs...).Validate(); err != nil {
			t.Errorf("%v: %v", kvs, err)
		}
	}
	for kvs, want := range map[[3]string]string{
		{"data.kind=image_folder"}:                                          "data.path: empty: data.kind image_folder needs ROOT",
		{"data.kind=image_folder", "data.path=/i", "data.mean=[1,2]"}:       "data.mean: [1 2]: want 3 values",
		{"data.kind=image_folder", "data.path=/i", "data.std=[1,0,1]"}:      "data.std: [1 0 1]: want every value > 0",
		{"data.image_size=32"}:                                              "data.image_size: 32: only data.kind image_folder",
		{"data.kind=synthetic-images", "data.synthetic_pool=-1"}:            "data.synthetic_pool: -1",
		{"data.kind=image_folder", "data.path=/i", "data.synthetic_pool=8"}: "data.synthetic_pool: 8: only data.kind synthetic-images",
		{"data.kind=image_folder", "data.path=/i", "data.image_size=-1"}:    "data.image_size: -1",
	} {
		var set []string
		for _, kv := range kvs {
			if kv != "" {
				set = append(set, kv)
			}
		}
		err := resnetConfig(t, set...).Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error with %q", set, err, want)
		}
	}
	for kv, want := range map[string]string{
		"model.depth=20":    "model.depth: 20: want 18, 34 or 50",
		"model.stem=cifar":  `model.stem: "cifar": want imagenet or small`,
		"model.layout=NHWC": `model.layout: "NHWC": want nchw or nhwc`,
		"model.width=0":     "model.width: 0: want > 0",
		"model.classes=7":   "model.classes: 7: MNIST has 10 classes",
		"data.kind=text":    "text with model.kind resnet",
	} {
		err := resnetConfig(t, kv).Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", kv, err, want)
		}
	}
}

// The new keys are omitted when unset, so the hash of every existing config is unchanged
// (hash_test.go pins a few; this says why they still hold).
func TestHash_resnetKeysOmittedWhenUnset(t *testing.T) {
	y := Default().YAML()
	for _, k := range []string{"depth:", "stem:", "classes:", "sync_batchnorm:"} {
		if strings.Contains(y, k) {
			t.Errorf("an unset %s appears in the YAML:\n%s", k, y)
		}
	}
}

// data.kind synthetic-tokens: for a gpt, with no data.path; refused for an mlp or a resnet and
// with a path, each in one line naming the key.
func TestValidate_syntheticTokens(t *testing.T) {
	gpt := func(kv ...string) *Config {
		c := Default()
		for _, s := range append([]string{"model.kind=gpt", "model.layers=2", "model.width=64", "model.heads=2", "model.context=32",
			"model.vocab=512", "train.epochs=1", "train.micro_batch=4", "train.lr=0.01", "data.kind=synthetic-tokens"}, kv...) {
			if err := c.Set(s); err != nil {
				t.Fatal(err)
			}
		}
		return c.Resolved()
	}
	if err := gpt().Validate(); err != nil {
		t.Fatalf("a gpt on synthetic tokens: %v", err)
	}
	if err := gpt("data.path=/x").Validate(); err == nil || !strings.Contains(err.Error(), "data.path: /x: data.kind synthetic-tokens reads nothing") {
		t.Errorf("with a path: %v", err)
	}
	if err := resnetConfig(t, "data.kind=synthetic-tokens").Validate(); err == nil || !strings.Contains(err.Error(), "data.kind: synthetic-tokens with model.kind resnet") {
		t.Errorf("a resnet: %v", err)
	}
}
