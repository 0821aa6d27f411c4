package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlot_writesPNGFromMetrics(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.jsonl")
	var b strings.Builder
	for s := 1; s <= 20; s++ {
		b.WriteString(`{"event":"step","step":` + itoa(s) + `,"loss":` + itoa(40-s) + `.5,"samples_per_sec":100,"tokens_per_sec":6400}` + "\n")
		if s%5 == 0 {
			b.WriteString(`{"event":"eval","step":` + itoa(s) + `,"eval_loss":` + itoa(41-s) + "}\n")
		}
	}
	b.WriteString(`{"event":"summary","steps":20}` + "\n")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plot.png")
	if err := runPlot([]string{in, "-o", out}); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%d bytes, not a PNG", len(png))
	}
	if err := runPlot([]string{filepath.Join(dir, "missing.jsonl")}); err == nil {
		t.Fatal("a missing file plotted")
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
