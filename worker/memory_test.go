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
	"github.com/goddp/goddp/model/cpu"
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

// --check-leaks passes a sound run and stops a leaking one at its first step, naming the tag.
func TestCheckLeaks_catchesPlantedLeak(t *testing.T) {
	cfg := tinyGPT(t, "train.micro_batch=4")
	if _, err := Run(context.Background(), cfg, Options{CheckLeaks: true, Logger: quiet()}); err != nil {
		t.Fatalf("a sound run failed the leak check: %v", err)
	}
	cfg = tinyGPT(t, "train.micro_batch=4")
	_, err := Run(context.Background(), cfg, Options{CheckLeaks: true, Logger: quiet(), wrapModel: func(m model.Model) model.Model {
		return &leakyModel{Model: m, dev: m.Params().Device()}
	}})
	if err == nil || !strings.Contains(err.Error(), "memory leak at step 0") || !strings.Contains(err.Error(), "planted.leak (4.00 KiB)") {
		t.Fatalf("err = %v, want a leak at step 0 naming planted.leak", err)
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

func TestMemTimeline_seriesByLayer(t *testing.T) {
	dev := cpu.New()
	base := dev.Alloc(tensor.F32, "params", 128)
	tl := recordMemory(dev)
	a := dev.Alloc(tensor.F32, "h.0.attn.q", 256)
	c := dev.Alloc(tensor.F32, "h.0.mlp.fc", 128)
	d := dev.Alloc(tensor.F16, "logits.chunk", 256)
	dev.Free(a)
	dev.Free(d)
	tl.stop()
	dev.Free(c)
	total, layers, order := tl.series()
	if len(total) != 6 || total[0] != 512 || total[3] != 512+1024+512+512 || total[5] != 1024 {
		t.Fatalf("total = %v", total)
	}
	if order[0] != "h.0" || len(order) != 2 || layers["h.0"][2] != 1536 || layers["logits"][5] != 0 {
		t.Fatalf("order %v layers %v", order, layers)
	}
	dev.Free(base)
	if len(tl.events) != 5 {
		t.Fatalf("%d events recorded after stop", len(tl.events))
	}
}
