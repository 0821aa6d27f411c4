package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// One spec of each kind, with the run-time fields (compute dtype, memory options) set.
func specsOfEachKind() map[string]Spec {
	g := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: true, Dropout: 0.1,
		Compute: tensor.F16, Checkpoint: 1, Attention: AttnMaterialized, LossChunk: 24, GemmEpilogue: true}.Spec()
	g.VocabUsed = 60
	m := MLPConfig{Widths: []int{784, 32, 10}, Activation: "gelu", Compute: tensor.F16, Checkpoint: 2}.Spec()
	r := ResNetConfig{Depth: 18, Stem: "small", Width: 4, Classes: 10, InC: 1, InH: 28, InW: 28, Compute: tensor.F16, Checkpoint: 1}.Spec()
	return map[string]Spec{SpecKindGPT: g, SpecKindMLP: m, SpecKindResNet: r}
}

// architecture is s without how a process runs it: what config.json and __metadata__ hold.
func architecture(s Spec) Spec {
	s.Compute, s.Checkpoint, s.Attention, s.CheckpointKeepAttn, s.LossChunk, s.GemmEpilogue = tensor.F32, 0, AttnAuto, false, 0, false
	return s
}

// Every kind's spec comes back from config.json and from __metadata__ as its architecture; the
// run-time fields are written nowhere.
func TestSpec_roundTripEveryKind(t *testing.T) {
	for kind, s := range specsOfEachKind() {
		t.Run(kind, func(t *testing.T) {
			want := architecture(s)
			js, err := ParseSpec(s.JSON())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(js, want) {
				t.Errorf("config.json round trip:\n got  %+v\n want %+v", js, want)
			}
			meta, ok, err := SpecFromMetadata(s.Metadata())
			if err != nil || !ok {
				t.Fatalf("metadata: ok %v, %v", ok, err)
			}
			if !reflect.DeepEqual(meta, want) {
				t.Errorf("__metadata__ round trip:\n got  %+v\n want %+v", meta, want)
			}
			for _, run := range []string{"compute", "checkpoint", "attention", "loss_chunk"} {
				if strings.Contains(string(s.JSON()), `"`+run+`"`) {
					t.Errorf("config.json holds %q:\n%s", run, s.JSON())
				}
			}
		})
	}
}

// config.json of each kind as builds before this Spec covered ResNet wrote it.
const (
	oldGPTSpec = `{
  "format": "goddp",
  "kind": "gpt",
  "dtype": "f32",
  "names": "goddp",
  "layers": 2,
  "width": 32,
  "heads": 4,
  "context": 16,
  "vocab": 64,
  "vocab_used": 60,
  "tied": true,
  "norm": "pre_ln",
  "final_norm": "layer_norm",
  "layer_norm_eps": 0.00001,
  "positions": "learned",
  "mlp_ratio": 4,
  "bias": true,
  "attention_scale": "1/sqrt(head)",
  "dropout": 0.10000000149011612,
  "activation": "gelu",
  "gelu_approx": "tanh",
  "linear_layout": "out_in",
  "input_normalization": "none (token ids)"
}
`
	oldMLPSpec = `{
  "format": "goddp",
  "kind": "mlp",
  "dtype": "f32",
  "names": "goddp",
  "bias": true,
  "widths": [
    784,
    32,
    10
  ],
  "activation": "gelu",
  "gelu_approx": "tanh",
  "linear_layout": "out_in",
  "input_normalization": "(x/255 - 0.1307)/0.3081"
}
`
	// A ResNet checkpoint's spec held only the kind ("carried for the record").
	oldResNetSpec = `{
  "format": "goddp",
  "kind": "resnet",
  "dtype": "f32",
  "names": "goddp",
  "activation": "",
  "linear_layout": "",
  "input_normalization": "none (synthetic noise images)"
}
`
)

// Specs written by earlier builds still read, from config.json and from __metadata__; a GPT's
// and an MLP's are written again to the byte (every new field is omitempty); an old ResNet spec
// reads but names what it lacks when asked to build a model.
func TestSpec_earlierBuildsStillRead(t *testing.T) {
	for _, old := range []string{oldGPTSpec, oldMLPSpec, oldResNetSpec} {
		s, err := ParseSpec([]byte(old))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(s.JSON()); got != old {
			t.Errorf("written again differently:\n%s\nwant\n%s", got, old)
		}
		back, ok, err := SpecFromMetadata(s.Metadata())
		if err != nil || !ok || !reflect.DeepEqual(back, s) {
			t.Errorf("__metadata__: %+v, %v, %v; want %+v", back, ok, err, s)
		}
	}
	old, _ := ParseSpec([]byte(oldResNetSpec))
	oldMeta := map[string]string{"model.activation": "", "model.dtype": "f32", "model.format": "goddp", "model.input_normalization": "none (synthetic noise images)",
		"model.kind": "resnet", "model.linear_layout": "", "model.names": "goddp"}
	if back, ok, err := SpecFromMetadata(oldMeta); err != nil || !ok || !reflect.DeepEqual(back, old) {
		t.Errorf("old ResNet __metadata__: %+v, %v, %v", back, ok, err)
	}
	if _, err := New(cpu.New(), old, 1); err == nil || !strings.Contains(err.Error(), "spec depth 0") {
		t.Errorf("New of an old ResNet spec: %v, want an error naming depth", err)
	}
	want := specsOfEachKind()
	for _, old := range []string{oldGPTSpec, oldMLPSpec} {
		s, _ := ParseSpec([]byte(old))
		w := architecture(want[s.Kind])
		w.InputNormalization = s.InputNormalization
		if !reflect.DeepEqual(s, w) {
			t.Errorf("old %s spec reads as\n %+v\nthis build's Spec() is\n %+v", s.Kind, s, w)
		}
	}
}

// New builds from a spec exactly the model the kind's constructor builds from its config: the
// same parameters (names, shapes, values), the same config, run-time options included.
func TestNew_sameModelAsTheConstructors(t *testing.T) {
	dev := cpu.New()
	const seed = 7
	gc := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: false, Dropout: 0.1,
		Compute: tensor.F16, Checkpoint: 1, Attention: AttnMaterialized, LossChunk: 24, CheckpointKeepAttn: true, GemmEpilogue: true}
	mc := MLPConfig{Widths: []int{20, 16, 10}, Activation: "relu", Dropout: 0.25, Compute: tensor.F16, Checkpoint: 2}
	rc := ResNetConfig{Depth: 18, Stem: "small", Width: 4, Classes: 10, InC: 1, InH: 8, InW: 8, Compute: tensor.F16, Checkpoint: 1}
	cases := []struct {
		kind string
		spec Spec
		old  func() (Model, error)
		cfg  func(Model) any
	}{
		{SpecKindGPT, gc.Spec(), func() (Model, error) { return NewGPT(dev, gc, seed) }, func(m Model) any {
			c := m.(*GPT).Cfg
			c.LossChunk = gc.LossChunk // NewGPT fills in the default when 0
			return c
		}},
		{SpecKindMLP, mc.Spec(), func() (Model, error) { return NewMLP(dev, mc, seed) }, func(m Model) any { return m.(*MLP).Cfg }},
		{SpecKindResNet, rc.Spec(), func() (Model, error) { return NewResNet(dev, rc, seed) }, func(m Model) any { return m.(*ResNet).Cfg }},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			want, err := c.old()
			if err != nil {
				t.Fatal(err)
			}
			defer want.Free()
			got, err := New(dev, c.spec, seed)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Free()
			if g, w := got.Params().SHA256(), want.Params().SHA256(); g != w {
				t.Errorf("param hash %s, the constructor's %s", g, w)
			}
			if g, w := names(got.Params()), names(want.Params()); !reflect.DeepEqual(g, w) {
				t.Errorf("params %v, the constructor's %v", g, w)
			}
			if g, w := c.cfg(got), c.cfg(want); !reflect.DeepEqual(g, w) {
				t.Errorf("config %+v, the constructor's %+v", g, w)
			}
			if got.Params().Half == nil {
				t.Error("compute f16 but no f16 copy of the weights")
			}
		})
	}
}

func names(ps *Params) []string {
	var out []string
	for _, p := range ps.List {
		out = append(out, fmt.Sprint(p.Name, p.Shape))
	}
	return out
}

// A spec that does not describe a model goddp builds is one line naming the field.
func TestNew_badSpecNamesTheField(t *testing.T) {
	each := specsOfEachKind()
	dev := cpu.New()
	cases := []struct {
		name  string
		kind  string
		edit  func(*Spec)
		field string
	}{
		{"unknown kind", SpecKindGPT, func(s *Spec) { s.Kind = "cnn" }, `spec kind "cnn": want gpt, mlp or resnet`},
		{"format", SpecKindMLP, func(s *Spec) { s.Format = "pt" }, "spec format"},
		{"gpt layers", SpecKindGPT, func(s *Spec) { s.Layers = 0 }, "spec layers 0"},
		{"gpt heads", SpecKindGPT, func(s *Spec) { s.Heads = 5 }, "spec heads 5"},
		{"gpt vocab", SpecKindGPT, func(s *Spec) { s.Vocab = -1 }, "spec vocab -1"},
		{"gpt norm", SpecKindGPT, func(s *Spec) { s.Norm = "post_ln" }, "spec norm"},
		{"gpt compute", SpecKindGPT, func(s *Spec) { s.Compute = tensor.I32 }, "spec compute i32"},
		{"gpt loss chunk", SpecKindGPT, func(s *Spec) { s.LossChunk = -1 }, "spec loss_chunk -1"},
		{"mlp widths", SpecKindMLP, func(s *Spec) { s.Widths = []int{784} }, "spec widths [784]"},
		{"mlp width", SpecKindMLP, func(s *Spec) { s.Widths = []int{784, 0, 10} }, "spec widths[1] = 0"},
		{"mlp activation", SpecKindMLP, func(s *Spec) { s.Activation = "tanh"; s.GELUApprox = "" }, "spec activation"},
		{"mlp dropout", SpecKindMLP, func(s *Spec) { s.Dropout = 1 }, "spec dropout 1"},
		{"mlp checkpoint", SpecKindMLP, func(s *Spec) { s.Checkpoint = -1 }, "spec checkpoint -1"},
		{"resnet depth", SpecKindResNet, func(s *Spec) { s.Depth = 20 }, "spec depth 20"},
		{"resnet stem", SpecKindResNet, func(s *Spec) { s.Stem = "cifar" }, `spec stem "cifar"`},
		{"resnet width", SpecKindResNet, func(s *Spec) { s.Width = 0 }, "spec width 0"},
		{"resnet classes", SpecKindResNet, func(s *Spec) { s.Classes = 0 }, "spec classes 0"},
		{"resnet image", SpecKindResNet, func(s *Spec) { s.Image = []int{28, 28} }, "spec image [28 28]"},
		{"resnet norm", SpecKindResNet, func(s *Spec) { s.Norm = "group_norm" }, "spec norm"},
		{"resnet bn eps", SpecKindResNet, func(s *Spec) { s.BatchNormEps = 1e-3 }, "spec batch_norm_eps"},
		{"resnet conv layout", SpecKindResNet, func(s *Spec) { s.ConvLayout = "out_kh_kw_in" }, "spec conv_layout"},
		{"resnet linear layout", SpecKindResNet, func(s *Spec) { s.LinearLayout = "in_out" }, "spec linear_layout"},
		{"resnet compute", SpecKindResNet, func(s *Spec) { s.Compute = tensor.I32 }, "spec compute i32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := each[c.kind]
			s.Widths = append([]int(nil), s.Widths...)
			s.Image = append([]int(nil), s.Image...)
			c.edit(&s)
			m, err := New(dev, s, 1)
			if err == nil {
				m.Free()
				t.Fatal("built")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "model: ") || !strings.Contains(msg, c.field) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line starting model: and containing %q", msg, c.field)
			}
		})
	}
}

// What a trainer asks a model (Input, TargetsPerSample, Classifier) is what its spec says, for
// every kind.
func TestModel_inputsAndTargetsPerKind(t *testing.T) {
	dev := cpu.New()
	specs := specsOfEachKind()
	want := map[string]struct {
		in         Input
		features   int
		perSample  int
		classifier bool
		image      bool
	}{
		SpecKindGPT:    {Input{Tokens: 16}, 0, 16, false, false},
		SpecKindMLP:    {Input{Shape: []int{784}}, 784, 1, true, false},
		SpecKindResNet: {Input{Shape: []int{1, 28, 28}}, 784, 1, true, true},
	}
	for kind, w := range want {
		t.Run(kind, func(t *testing.T) {
			s := specs[kind]
			m, err := New(dev, s, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			for who, got := range map[string]struct {
				in         Input
				perSample  int
				classifier bool
			}{"spec": {s.Input(), s.TargetsPerSample(), s.Classifier()}, "model": {m.Input(), m.TargetsPerSample(), m.Classifier()}} {
				if !reflect.DeepEqual(got.in, w.in) || got.perSample != w.perSample || got.classifier != w.classifier {
					t.Errorf("%s: input %+v, targets per sample %d, classifier %v; want %+v, %d, %v", who, got.in, got.perSample, got.classifier, w.in, w.perSample, w.classifier)
				}
				if f := got.in.Features(); f != w.features {
					t.Errorf("%s: features %d, want %d", who, f, w.features)
				}
				if c, h, wd, ok := got.in.Image(); ok != w.image || (ok && (c != 1 || h != 28 || wd != 28)) {
					t.Errorf("%s: image %d,%d,%d %v, want %v", who, c, h, wd, ok, w.image)
				}
			}
		})
	}
	if in := (Spec{Kind: "cnn"}).Input(); in.Tokens != 0 || in.Shape != nil || (Spec{Kind: "cnn"}).Classifier() {
		t.Errorf("a spec of no known kind: %+v", in)
	}
}

func TestSpec_summary(t *testing.T) {
	for kind, want := range map[string]string{
		SpecKindGPT:    "gpt layers 2 width 32 heads 4 context 16 vocab 60 padded to 64",
		SpecKindMLP:    "mlp 784-32-10 gelu",
		SpecKindResNet: `resnet depth 18 stem "small" width 4 classes 10`,
	} {
		if got := specsOfEachKind()[kind].Summary(); got != want {
			t.Errorf("%s: %q, want %q", kind, got, want)
		}
	}
	nhwc := specsOfEachKind()[SpecKindResNet]
	nhwc.Layout = tensor.NHWC
	if got, want := nhwc.Summary(), `resnet depth 18 stem "small" width 4 classes 10 layout nhwc`; got != want {
		t.Errorf("NHWC: %q, want %q", got, want)
	}
}

// A ResNet's checkpoint directory (weights with the BatchNorm running statistics beside them,
// config.json its spec) opens as the model it holds, buffers included; a buffer missing is named.
func TestOpen_resnetWithBuffers(t *testing.T) {
	dev := cpu.New()
	spec := ResNetConfig{Depth: 18, Stem: "small", Width: 4, Classes: 3, InC: 1, InH: 8, InW: 8}.Spec()
	m, err := New(dev, spec, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	bufs := m.(Buffered).Buffers()
	stats := make([]float32, bufs.N)
	for i := range stats {
		stats[i] = float32(i%7) * 0.25
	}
	dev.Upload(bufs.Data, stats)
	ts := m.Params().NamedWeights()
	for _, b := range bufs.List {
		ts = append(ts, NamedTensor{Name: b.Name, DType: tensor.F32, Shape: []int{b.Len}, Data: F32Bytes(tensor.ToHost(b.T))})
	}
	write := func(ts []NamedTensor) string {
		dir := t.TempDir()
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, ts, spec.Metadata()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, WeightsFile), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), spec.JSON(), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	back, backSpec, err := Open(dev, write(ts))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Free()
	if backSpec.Kind != SpecKindResNet || back.Params().SHA256() != m.Params().SHA256() {
		t.Errorf("opened a %s with param hash %s, saved %s", backSpec.Kind, back.Params().SHA256(), m.Params().SHA256())
	}
	if got := tensor.ToHost(back.(Buffered).Buffers().Data); !reflect.DeepEqual(got, stats) {
		t.Errorf("buffers not loaded: %v…", got[:8])
	}
	missing := bufs.List[3].Name
	var less []NamedTensor
	for _, x := range ts {
		if x.Name != missing {
			less = append(less, x)
		}
	}
	if _, _, err := Open(dev, write(less)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("buffer %s missing: %v", missing, err)
	}
}

// Every field of each kind's configuration survives Config → Spec → Config: the spec is how
// ddptrain builds a model (worker.ModelSpec, model.New), so a field it drops is silently ignored
// in every run (ResNetConfig.Layout was, until session 13: every ddptrain ResNet ran NCHW). Each
// case sets every field to a value other than its zero, which the test checks by reflection, so
// a field added later must be added here, and its round trip is then checked too.
func TestSpec_configRoundTripKeepsEveryField(t *testing.T) {
	nonZero := func(name string, cfg any) {
		t.Helper()
		v := reflect.ValueOf(cfg)
		for i := 0; i < v.NumField(); i++ {
			if v.Field(i).IsZero() {
				t.Errorf("%s.%s is its zero value in this test: give it another, so that its round trip is checked", name, v.Type().Field(i).Name)
			}
		}
	}
	resnet := ResNetConfig{Depth: 50, Stem: "small", Width: 8, Classes: 7, InC: 3, InH: 32, InW: 30, Compute: tensor.F16,
		Checkpoint: 2, Layout: tensor.NHWC}
	nonZero("ResNetConfig", resnet)
	if got, err := resnet.Spec().ResNetConfig(); err != nil || !reflect.DeepEqual(got, resnet) {
		t.Errorf("ResNetConfig through its spec: %+v (%v), want %+v", got, err, resnet)
	}
	gpt := GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16, Vocab: 64, Tied: true, Dropout: 0.1, Compute: tensor.F16,
		Checkpoint: 1, LossChunk: 8, Attention: AttnFlash, CheckpointKeepAttn: true, GemmEpilogue: true}
	nonZero("GPTConfig", gpt)
	if got, err := gpt.Spec().GPTConfig(); err != nil || !reflect.DeepEqual(got, gpt) {
		t.Errorf("GPTConfig through its spec: %+v (%v), want %+v", got, err, gpt)
	}
	mlp := MLPConfig{Widths: []int{5, 4, 3}, Activation: "gelu", Dropout: 0.1, Compute: tensor.F16, Checkpoint: 1}
	nonZero("MLPConfig", mlp)
	if got, err := mlp.Spec().MLPConfig(); err != nil || !reflect.DeepEqual(got, mlp) {
		t.Errorf("MLPConfig through its spec: %+v (%v), want %+v", got, err, mlp)
	}
}
