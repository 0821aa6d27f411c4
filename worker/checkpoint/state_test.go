package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/config"
)

// A checkpoint is written in the background: Save returns while the disk is still busy (a slow
// fsync used to hold rank 0 while the other ranks ran into the collective timeout), the next
// Save and WaitWrite wait for it, and what lands is a complete checkpoint of the step it was
// taken at.
func TestState_saveDoesNotBlockTheStep(t *testing.T) {
	dev := cpu.New()
	mc := model.MLPConfig{Widths: []int{4, 3, 2}, Activation: "relu"}
	m, err := model.NewMLP(dev, mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	opt, err := model.NewAdamW(m.Params(), model.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	sc, err := model.NewScaler(dev, model.ScalerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Free()
	cfg := config.Default()
	cfg.Checkpoint.Dir = filepath.Join(t.TempDir(), "ck")

	release := make(chan struct{})
	old := syncFile
	syncFile = func(f *os.File) error { <-release; return f.Sync() }
	defer func() { syncFile = old }()
	st := &State{Step: 7, Spec: mc.Spec()}
	done := make(chan error, 1)
	go func() { done <- st.Save(cfg, 1, m.Params(), opt, nil, sc, quiet()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Save waited for the disk")
	}
	st.Step = 8 // the run moves on while the write is in flight
	if p, _ := Latest(cfg.Checkpoint.Dir); p != "" {
		t.Fatalf("a checkpoint is complete before its files are synced: %s", p)
	}
	if step, busy := st.Writing(10 * time.Millisecond); !busy || step != 7 {
		t.Fatalf("Writing() = %d, %v while step 7's write waits for the disk; want 7, true (the trainer skips a checkpoint then)", step, busy)
	}
	close(release)
	if err := st.WaitWrite(); err != nil {
		t.Fatal(err)
	}
	if _, busy := st.Writing(0); busy {
		t.Fatal("Writing() says busy after WaitWrite")
	}
	p, err := Latest(cfg.Checkpoint.Dir)
	if err != nil || filepath.Base(p) != "step-00000007" {
		t.Fatalf("latest checkpoint %q, %v; want step 7's", p, err)
	}
	ck, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var saved State
	if err := json.Unmarshal(ck.State, &saved); err != nil || saved.Step != 7 {
		t.Fatalf("state.json says step %d (%v), want the snapshot's 7", saved.Step, err)
	}
}
