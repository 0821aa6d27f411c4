package worker

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// oldBuildModel is buildModel as it was before model.New built every kind (the second factory,
// kept here to pin that the one factory builds the same models).
func oldBuildModel(dev tensor.Device, cfg *Config) (model.Model, error) {
	seed := uint64(cfg.Seed)
	switch cfg.Model.Kind {
	case "mlp":
		return model.NewMLP(dev, mlpConfig(cfg), seed)
	case "gpt":
		return model.NewGPT(dev, gptConfig(cfg), seed)
	}
	c, h, wd := imageShape(cfg)
	stem := cfg.Model.Stem
	if stem == "" {
		stem = "imagenet"
		if wd <= 64 {
			stem = "small"
		}
	}
	return model.NewResNet(dev, model.ResNetConfig{Depth: cfg.Model.Depth, Stem: stem, Width: cfg.Model.Width,
		Classes: cfg.Model.Classes, InC: c, InH: h, InW: wd, Compute: computeDType(cfg), Checkpoint: cfg.Model.Checkpoint.Every, Layout: imageLayout(cfg)}, seed)
}

// Every config's model, built through ModelSpec and model.New, is the model the kind's own
// constructor built before: the same parameters to the bit (so the same param_sha256 at the
// end of every run), the same configuration, precision and memory options included. Its spec
// says what the loop needs: one sample's input and targets, classifier or not.
// mnistAnywhere points an MNIST config's data.path at an empty directory: building the model
// reads no data, and a host without the module proxy (the GPU host) cannot fetch GoMNIST's files.
func mnistAnywhere(t *testing.T, file string) []string {
	if !strings.HasPrefix(file, "mnist") {
		return nil
	}
	return []string{"data.path=" + t.TempDir()}
}

func TestModelSpec_buildsTheSameModels(t *testing.T) {
	cases := []struct {
		file       string
		sets       []string
		input      model.Input
		perSample  int
		classifier bool
	}{
		{"opticks-gpt-tiny.yaml", []string{"model.layers=2", "model.width=64", "model.context=32"}, model.Input{Tokens: 32}, 32, false},
		{"opticks-gpt-tiny.yaml", []string{"model.layers=2", "model.width=64", "model.context=32", "precision=fp16", "model.checkpoint=blocks",
			"model.dropout=0", "model.attention=flash", "model.checkpoint_keep_attention=true", "model.gemm_epilogue=true"}, model.Input{Tokens: 32}, 32, false},
		{"mnist-mlp.yaml", nil, model.Input{Shape: []int{784}}, 1, true},
		{"mnist-mlp.yaml", []string{"precision=fp16", "model.activation=gelu", "model.dropout=0.1", "model.checkpoint=blocks"}, model.Input{Shape: []int{784}}, 1, true},
		{"mnist-resnet.yaml", []string{"model.width=4"}, model.Input{Shape: []int{1, 28, 28}}, 1, true},
		{"mnist-resnet.yaml", []string{"model.width=4", "model.stem=", "precision=fp16", "model.checkpoint=blocks"}, model.Input{Shape: []int{1, 28, 28}}, 1, true},
		{"resnet50-synthetic.yaml", []string{"model.depth=18", "model.width=4", "model.classes=7"}, model.Input{Shape: []int{3, 224, 224}}, 1, true},
		// model.layout reaches the model (until session 13 the spec dropped it: ddptrain ran NCHW)
		{"resnet50-synthetic.yaml", []string{"model.depth=18", "model.width=8", "model.layout=nhwc", "precision=fp16"}, model.Input{Shape: []int{3, 224, 224}}, 1, true},
	}
	dev := cpu.New()
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			cfg, err := LoadConfig(filepath.Join("..", "configs", c.file), append(mnistAnywhere(t, c.file), append([]string{"seed=11"}, c.sets...)...))
			if err != nil {
				t.Fatal(err)
			}
			spec, err := ModelSpec(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, err := oldBuildModel(dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Free()
			got, err := buildModel(dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Free()
			if g, w := got.Params().SHA256(), want.Params().SHA256(); g != w {
				t.Errorf("param hash %s, the old factory's %s", g, w)
			}
			if g, w := reflect.TypeOf(got), reflect.TypeOf(want); g != w {
				t.Fatalf("%v, the old factory's %v", g, w)
			}
			if g, w := modelCfg(got), modelCfg(want); !reflect.DeepEqual(g, w) {
				t.Errorf("config %+v, the old factory's %+v", g, w)
			}
			if (got.Params().Half != nil) != (cfg.Precision == "fp16") {
				t.Errorf("precision %s, f16 copy %v", cfg.Precision, got.Params().Half != nil)
			}
			for who, v := range map[string]struct {
				in         model.Input
				perSample  int
				classifier bool
			}{"spec": {spec.Input(), spec.TargetsPerSample(), spec.Classifier()}, "model": {got.Input(), got.TargetsPerSample(), got.Classifier()}} {
				if !reflect.DeepEqual(v.in, c.input) || v.perSample != c.perSample || v.classifier != c.classifier {
					t.Errorf("%s: input %+v, targets per sample %d, classifier %v; want %+v, %d, %v", who, v.in, v.perSample, v.classifier, c.input, c.perSample, c.classifier)
				}
			}
		})
	}
}

func modelCfg(m model.Model) any {
	switch m := m.(type) {
	case *model.GPT:
		return m.Cfg
	case *model.MLP:
		c := m.Cfg
		if c.Activation == "" {
			c.Activation = "relu" // the spec names the default
		}
		return c
	case *model.ResNet:
		return m.Cfg
	}
	return nil
}

// A ResNet's checkpoint now carries its whole architecture: model.Open-style readers build it
// from the spec alone.
func TestModelSpec_resnetSpecBuildsFromJSON(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("..", "configs", "mnist-resnet.yaml"), append(mnistAnywhere(t, "mnist-resnet.yaml"), "model.width=4"))
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := ModelSpec(cfg)
	back, err := model.ParseSpec(spec.JSON())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cpu.New(), back, uint64(cfg.Seed))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	r := m.(*model.ResNet).Cfg
	if r.Depth != 18 || r.Stem != "small" || r.Width != 4 || r.Classes != 10 || r.InC != 1 || r.InH != 28 || r.InW != 28 {
		t.Errorf("built from config.json: %+v", r)
	}
}
