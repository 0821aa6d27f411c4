package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

func ckptTensors(seed float32) (w, o []model.NamedTensor) {
	w = []model.NamedTensor{
		{Name: "fc1.weight", DType: tensor.F32, Shape: []int{2, 2}, Data: model.F32Bytes([]float32{seed, 2, 3, 4})},
		{Name: "fc1.bias", DType: tensor.F32, Shape: []int{2}, Data: model.F32Bytes([]float32{-1, seed})},
	}
	o = []model.NamedTensor{
		{Name: "fc1.weight.m", DType: tensor.F32, Shape: []int{2, 2}, Data: model.F32Bytes([]float32{0.1, 0.2, 0.3, seed})},
	}
	return w, o
}

type testState struct {
	Step   int     `json:"step"`
	Scale  float64 `json:"scale"`
	Loader struct{ Epoch, Step int }
}

func saveTest(t *testing.T, dir string, step int) string {
	t.Helper()
	w, o := ckptTensors(float32(step))
	st := testState{Step: step, Scale: 1024}
	st.Loader.Epoch, st.Loader.Step = 1, step
	p, err := Save(dir, step, w, o, st)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckpoint_roundTrip(t *testing.T) {
	dir := t.TempDir()
	p := saveTest(t, dir, 42)
	if filepath.Base(p) != "step-00000042" {
		t.Errorf("path %s", p)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Step != 42 || len(c.Weights) != 2 || len(c.Optim) != 1 {
		t.Fatalf("loaded %+v", c)
	}
	if c.Weights[0].Name != "fc1.bias" || model.BytesF32(c.Weights[0].Data)[1] != 42 {
		t.Errorf("weights %+v", c.Weights)
	}
	var st testState
	if err := json.Unmarshal(c.State, &st); err != nil || st.Step != 42 || st.Scale != 1024 || st.Loader.Step != 42 {
		t.Errorf("state %s: %v", c.State, err)
	}
	// Re-saving the same step replaces it.
	if _, err := Save(dir, 42, c.Weights, c.Optim, map[string]int{"step": 42}); err != nil {
		t.Fatal(err)
	}
	if c2, err := Load(p); err != nil || string(c2.State) != "{\n  \"step\": 42\n}" {
		t.Errorf("replaced: %v %s", err, c2.State)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries after replacing, want 1", len(ents))
	}
}

func TestCheckpoint_damage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(p string)
		want   []string
	}{
		{"truncated weights", func(p string) {
			f := filepath.Join(p, "model.safetensors")
			b, _ := os.ReadFile(f)
			os.WriteFile(f, b[:len(b)-5], 0o644)
		}, []string{"model.safetensors", "truncated"}},
		{"bit flip in optim", func(p string) {
			f := filepath.Join(p, "optim.safetensors")
			b, _ := os.ReadFile(f)
			b[len(b)-2] ^= 0x10
			os.WriteFile(f, b, 0o644)
		}, []string{"optim.safetensors", "corrupted"}},
		{"missing state", func(p string) { os.Remove(filepath.Join(p, "state.json")) },
			[]string{"state.json", "missing"}},
		{"missing manifest", func(p string) { os.Remove(filepath.Join(p, "MANIFEST.json")) },
			[]string{"MANIFEST.json", "missing"}},
		{"future format", func(p string) {
			f := filepath.Join(p, "MANIFEST.json")
			b, _ := os.ReadFile(f)
			os.WriteFile(f, []byte(strings.Replace(string(b), `"format_version": 1`, `"format_version": 9`, 1)), 0o644)
		}, []string{"format version 9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := saveTest(t, t.TempDir(), 7)
			c.damage(p)
			got, err := Load(p)
			if err == nil || got != nil {
				t.Fatalf("damaged checkpoint loaded: %+v", got)
			}
			if !strings.HasPrefix(err.Error(), "checkpoint: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCheckpoint_latestSkipsBrokenAndTmp(t *testing.T) {
	dir := t.TempDir()
	if p, err := Latest(filepath.Join(dir, "none")); p != "" || err != nil {
		t.Errorf("missing dir: %q %v", p, err)
	}
	saveTest(t, dir, 100)
	good := saveTest(t, dir, 200)
	broken := saveTest(t, dir, 300)
	os.Remove(filepath.Join(broken, "MANIFEST.json"))
	// A save interrupted before its rename: a newer .tmp directory.
	os.MkdirAll(filepath.Join(dir, ".tmp-step-00000400-123"), 0o755)
	os.WriteFile(filepath.Join(dir, "step-notanumber"), nil, 0o644)
	p, err := Latest(dir)
	if err != nil || p != good {
		t.Errorf("Latest = %q, %v; want %q", p, err, good)
	}
}

func TestCheckpoint_prune(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []int{1, 2, 3, 4, 5} {
		saveTest(t, dir, s)
	}
	broken := filepath.Join(dir, "step-00000006")
	os.MkdirAll(broken, 0o755) // incomplete, newest
	// Temporary directories: this process's and a dead process's of this host go; a live
	// process's (another job in the same dir) and another host's stay, as do names it cannot read.
	dead := exec.Command("true")
	dead.Run()
	tmps := map[string]bool{
		".tmp-step-00000007-" + tmpOwner() + "-111":                              false,
		fmt.Sprintf(".tmp-step-00000007-%s-%d-222", hostTag(), dead.Process.Pid): false,
		fmt.Sprintf(".tmp-step-00000007-%s-%d-333", hostTag(), os.Getppid()):     true,
		fmt.Sprintf(".tmp-step-00000007-other-host-%d-444", dead.Process.Pid):    true,
		".tmp-step-00000007-x": true,
	}
	for name := range tmps {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
	}
	if err := Prune(dir, 2); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if keep, ok := tmps[e.Name()]; ok {
			if !keep {
				t.Errorf("prune left %s", e.Name())
			}
			delete(tmps, e.Name())
			continue
		}
		names = append(names, e.Name())
	}
	for name, keep := range tmps {
		if keep {
			t.Errorf("prune removed %s, which is not this process's nor a dead one's of this host", name)
		}
	}
	if strings.Join(names, ",") != "step-00000004,step-00000005,step-00000006" {
		t.Errorf("after prune: %v", names)
	}
	if p, _ := Latest(dir); filepath.Base(p) != "step-00000005" {
		t.Errorf("latest after prune %q", p)
	}
}

// A checkpoint sent to another host (ckpt_sync.go) is written by the same atomic commit as a save:
// it loads back equal, replaces a broken directory of its step, and a damaged one is refused
// without leaving anything behind.
func TestCheckpoint_receivedCopy(t *testing.T) {
	src := saveTest(t, t.TempDir(), 20)
	bundle, err := packCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	files, err := unpackCheckpoint(bundle)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "step-00000020"), 0o755) // a broken copy of the same step
	got, err := writeCheckpointFiles(dir, 20, files)
	if err != nil || filepath.Base(got) != "step-00000020" {
		t.Fatalf("writeCheckpointFiles = %q, %v", got, err)
	}
	a, errA := Load(src)
	b, errB := Load(got)
	if errA != nil || errB != nil || string(a.State) != string(b.State) || len(a.Weights) != len(b.Weights) {
		t.Fatalf("the copy differs: %v %v", errA, errB)
	}

	damaged := map[string][]byte{}
	for k, v := range files {
		damaged[k] = append([]byte(nil), v...)
	}
	damaged["model.safetensors"][len(damaged["model.safetensors"])-1] ^= 1
	dir2 := t.TempDir()
	if _, err := writeCheckpointFiles(dir2, 20, damaged); err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("a damaged copy was written: %v", err)
	}
	if ents, _ := os.ReadDir(dir2); len(ents) != 0 {
		t.Errorf("a refused copy left %v", ents)
	}
	// The refused copy does not touch a good checkpoint of the same step.
	if _, err := writeCheckpointFiles(dir, 20, damaged); err == nil {
		t.Fatal("a damaged copy replaced a good one")
	}
	if err := Verify(got); err != nil {
		t.Errorf("the good copy after a refused one: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dir after a refused copy: %v", ents)
	}
}

// Resume: nothing to resume from is "", a good checkpoint behind a broken newer one
// is resumed, and a directory whose every checkpoint is broken is an error naming each broken
// file, unless fresh.
func TestResume_allBrokenFails(t *testing.T) {
	dir := t.TempDir()
	if p, err := Resume(filepath.Join(dir, "none"), false, quiet()); p != "" || err != nil {
		t.Fatalf("no directory: %q, %v", p, err)
	}
	good := saveTest(t, dir, 10)
	bad := saveTest(t, dir, 20)
	os.Truncate(filepath.Join(bad, FileOptim), 3)
	if p, err := Resume(dir, false, quiet()); p != good || err != nil {
		t.Fatalf("one good, one broken: %q, %v", p, err)
	}
	b, _ := os.ReadFile(filepath.Join(good, FileWeights))
	b[len(b)-1] ^= 1
	os.WriteFile(filepath.Join(good, FileWeights), b, 0o644)
	os.MkdirAll(filepath.Join(dir, ".tmp-step-00000030-x"), 0o755) // an interrupted save: not a checkpoint
	_, err := Resume(dir, false, quiet())
	if !errors.Is(err, ErrAllBroken) {
		t.Fatalf("every checkpoint broken: %v", err)
	}
	for _, want := range []string{filepath.Join(bad, FileOptim), filepath.Join(good, FileWeights), "checkpoint.fresh_if_broken"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
	if p, err := Resume(dir, true, quiet()); p != "" || err != nil {
		t.Errorf("fresh: %q, %v", p, err)
	}
	// A fresh start sets the broken ones aside: nothing left to resume, count or prune.
	if paths, _, _ := StepDirs(dir); len(paths) != 0 {
		t.Errorf("step directories left after a fresh start: %v", paths)
	}
	for _, b := range []string{"broken-step-00000010", "broken-step-00000020"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	if p, err := Resume(dir, false, quiet()); p != "" || err != nil {
		t.Errorf("after the fresh start: %q, %v", p, err)
	}
}

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
