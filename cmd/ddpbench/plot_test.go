package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
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

// Step axes are labelled with integers at every major tick; value axes with the decimals their
// spacing needs.
func TestPlotTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var l []string
		for _, tk := range ts {
			if tk.Label != "" {
				l = append(l, tk.Label)
			}
		}
		return l
	}
	for _, tt := range []struct {
		m        plot.Ticker
		min, max float64
		want     string
	}{
		{stepTicks, 0, 250, "0 50 100 150 200 250"},
		{stepTicks, 25, 250, "50 100 150 200 250"},
		{stepTicks, 1, 3, "1 2 3"},
		{stepTicks, 0, 20000, "0 5000 10000 15000 20000"},
		{valueTicks, 0.1, 2.35, "0.5 1.0 1.5 2.0"},
		{valueTicks, 0, 6400, "0 1000 2000 3000 4000 5000 6000"},
		{valueTicks, 2.31, 2.36, "2.31 2.32 2.33 2.34 2.35 2.36"},
	} {
		if got := strings.Join(labels(tt.m.Ticks(tt.min, tt.max)), " "); got != tt.want {
			t.Errorf("%+v [%g, %g]: labels %q, want %q", tt.m, tt.min, tt.max, got, tt.want)
		}
	}
	if h := headroom(plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 6}}); h != 7 {
		t.Errorf("headroom of [2, 6] = %g, want 7", h)
	}
}
