package worker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// leakyModel allocates a block in every Backward and never frees it.
type leakyModel struct {
	model.Model
	dev    tensor.Device
	leaked []*tensor.Tensor
}

func (l *leakyModel) Backward(scale float32) {
	l.Model.Backward(scale)
	l.leaked = append(l.leaked, l.dev.Alloc(tensor.F32, "planted.leak", 1000))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// --check-leaks passes a sound run and stops a leaking one at its second step (the first grows
// from the first's end), naming the tag.
func TestCheckLeaks_catchesPlantedLeak(t *testing.T) {
	cfg := tinyGPT(t, "train.micro_batch=4")
	if _, err := Run(context.Background(), cfg, Options{CheckLeaks: true, Logger: quiet()}); err != nil {
		t.Fatalf("a sound run failed the leak check: %v", err)
	}
	cfg = tinyGPT(t, "train.micro_batch=4")
	_, err := Run(context.Background(), cfg, Options{CheckLeaks: true, Logger: quiet(), wrapModel: func(m model.Model) model.Model {
		return &leakyModel{Model: m, dev: m.Params().Device()}
	}})
	if err == nil || !strings.Contains(err.Error(), "memory leak at step 1") || !strings.Contains(err.Error(), "planted.leak (8.00 KiB)") {
		t.Fatalf("err = %v, want a leak at step 1 naming planted.leak", err)
	}
	t.Log(err)
}

// --memory-plot writes a PNG of the second step, with the blocks' layers in it.
func TestMemoryPlot_writesPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem.png")
	cfg := tinyGPT(t, "train.micro_batch=4", "model.checkpoint=every_2")
	if _, err := Run(context.Background(), cfg, Options{MemoryPlot: path, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s: %d bytes, not a PNG", path, len(b))
	}
}
