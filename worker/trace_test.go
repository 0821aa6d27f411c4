package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --trace writes each step's phases as spans on the compute thread — data (the loader and the
// upload), forward, backward, the loss scaler's inf check (its read-back waits for the device),
// optimizer — one of each per micro-step or step, every one inside its step's wall time.
func TestTrace_stepPhases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	const steps = 3
	cfg := tinyGPT(t, "precision=fp16", "train.micro_batch=2", "train.global_batch=4", "train.max_steps=3")
	if _, err := Run(context.Background(), cfg, Options{Logger: quiet(), TracePath: path}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Ph   string  `json:"ph"`
			Dur  float64 `json:"dur"`
			Tid  int     `json:"tid"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if e.Dur < 0 {
			t.Errorf("span %s of negative duration %v µs", e.Name, e.Dur)
		}
		if e.Tid == 0 {
			n[e.Name]++
		}
	}
	// two micro-steps a step (global batch 4 of micro-batch 2 on one rank)
	for name, want := range map[string]int{"data": 2 * steps, "forward": 2 * steps, "backward": 2 * steps, "backward enqueue": 2 * steps, "inf check": steps, "optimizer": steps} {
		if n[name] != want {
			t.Errorf("%d %q spans, want %d (all: %v)", n[name], name, want, n)
		}
	}
}

// --profile-step names a step of the run on a device that profiles kernels; the CPU device has
// no kernel profile, which the run says before training.
func TestProfileStep_refusedWhereNoProfile(t *testing.T) {
	cfg := tinyGPT(t, "train.max_steps=2")
	_, err := Run(context.Background(), cfg, Options{Logger: quiet(), ProfileStep: 1})
	if err == nil || !strings.Contains(err.Error(), "--profile-step") || !strings.Contains(err.Error(), "cpu") {
		t.Fatalf("err = %v, want --profile-step refused naming the cpu device", err)
	}
}
