package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/worker"
)

// ddptrain eval on a tiny checkpoint: the config the checkpoint records (or --config), the JSON
// and the human line, the score of the run's own last evaluation.
func TestEval_tinyCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	sets := []string{"model.layers=1", "model.width=32", "model.heads=2", "model.context=16", "train.max_steps=3",
		"train.micro_batch=4", "train.eval_batches=2", "checkpoint.dir=" + dir}
	cfg, err := worker.LoadConfig("../../configs/opticks-gpt-tiny.yaml", sets)
	if err != nil {
		t.Fatal(err)
	}
	res, err := worker.Run(context.Background(), cfg, worker.Options{Device: "cpu", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--checkpoint", dir, "--json", "--device", "cpu", "--set", "train.eval_batches=2"},
		{"--checkpoint", filepath.Join(dir, "step-00000003"), "--json", "--device", "cpu", "--config", "../../configs/opticks-gpt-tiny.yaml",
			"--set", "model.layers=1", "--set", "model.width=32", "--set", "model.heads=2", "--set", "model.context=16", "--set", "train.micro_batch=4",
			"--set", "train.eval_batches=2"},
	} {
		var out, errb bytes.Buffer
		if code := runEval(args, &out, &errb); code != 0 {
			t.Fatalf("ddptrain eval %v: exit %d\n%s", args, code, errb.String())
		}
		var r worker.EvalReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("--json printed %q: %v", out.String(), err)
		}
		if r.Step != 3 || r.EvalLoss != res.EvalLoss || r.Samples != 8 || !(r.Seconds > 0) || r.EvalAccuracy != nil {
			t.Errorf("ddptrain eval %v: %+v, want step 3, the run's eval loss %v, 8 samples", args, r, res.EvalLoss)
		}
	}
	var out, errb bytes.Buffer
	if code := runEval([]string{"--checkpoint", dir, "--device", "cpu", "--set", "train.eval_batches=1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "eval of "+filepath.Join(dir, "step-00000003")+" (step 3): loss ") || !strings.Contains(s, "samples 4") {
		t.Errorf("human line %q", s)
	}
	if code := runEval(nil, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("no --checkpoint: exit %d, want %d", code, exitUsage)
	}
	if code := runEval([]string{"--checkpoint", t.TempDir()}, io.Discard, &errb); code != exitUsage || !strings.Contains(errb.String(), "neither a checkpoint") {
		t.Errorf("an empty directory: exit %d, %s", code, errb.String())
	}
}
