package observe

// memplot.go: --memory-plot FILE.png, device memory over one training step. While the step runs,
// the device reports every allocation and free (tensor.Observable); the plot has the allocated
// total against the event number and, under it, the live bytes of each layer (tags grouped by
// layer: "h.3.attn.q" → "h.3", "logits.chunk" → "logits"), so one sees the activations pile up
// block by block in forward and drain in backward.

import (
	"fmt"
	"image/color"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/goddp/goddp/model/tensor"
)

// MemTimeline records a device's allocation events.
type MemTimeline struct {
	dev    tensor.Device
	start  int64 // allocated bytes before the first event
	events []tensor.AllocEvent
	// prior[i]: event i frees a block allocated before the recording (the last step's logits,
	// say), which no layer's line counted: it leaves the layers' lines as they are.
	prior []bool
	mine  map[tensor.Buffer]bool // blocks allocated while recording and still live
}

// RecordMemory starts recording dev's allocation events (nil when the device cannot report them).
func RecordMemory(dev tensor.Device) *MemTimeline {
	obs, ok := dev.(tensor.Observable)
	if !ok {
		return nil
	}
	tl := &MemTimeline{dev: dev, start: dev.Stats().Allocated, mine: map[tensor.Buffer]bool{}}
	obs.SetObserver(func(e tensor.AllocEvent) {
		prior := false
		if e.Free {
			prior = !tl.mine[e.Buffer]
			delete(tl.mine, e.Buffer)
		} else {
			tl.mine[e.Buffer] = true // live anyway; forgotten when freed or at Stop
		}
		e.Buffer = nil // the events keep no blocks alive in the caller's mind
		tl.events = append(tl.events, e)
		tl.prior = append(tl.prior, prior)
	})
	return tl
}

// Stop ends the recording.
func (tl *MemTimeline) Stop() {
	if tl != nil {
		tl.dev.(tensor.Observable).SetObserver(nil)
		tl.mine = nil
	}
}

// layerOf groups a tag by layer: GPT blocks "h.N.…" → "h.N", MLP stages "fc.N…" → "fc.N", anything
// else its first dotted part.
func layerOf(tag string) string {
	parts := strings.SplitN(tag, ".", 3)
	if len(parts) >= 2 && (parts[0] == "h" || parts[0] == "fc") {
		return parts[0] + "." + parts[1]
	}
	return parts[0]
}

// series turns the events into the allocated total and the live bytes per layer after each
// event (index 0 is before the first), with the layers ordered by their highest live bytes.
func (tl *MemTimeline) series() (total []float64, layers map[string][]float64, order []string) {
	n := len(tl.events) + 1
	total = make([]float64, n)
	layers = map[string][]float64{}
	live := map[string]int64{}
	high := map[string]int64{}
	total[0] = float64(tl.start)
	for i, e := range tl.events {
		l := layerOf(e.Tag)
		if _, ok := layers[l]; !ok {
			layers[l] = make([]float64, n)
		}
		switch {
		case e.Free && !tl.prior[i]:
			live[l] -= e.Bytes
		case !e.Free:
			live[l] += e.Bytes
		}
		high[l] = max(high[l], live[l])
		total[i+1] = float64(e.Allocated)
		for name, s := range layers {
			s[i+1] = float64(live[name])
		}
	}
	for l := range layers {
		order = append(order, l)
	}
	sort.Slice(order, func(i, j int) bool {
		if high[order[i]] != high[order[j]] {
			return high[order[i]] > high[order[j]]
		}
		return order[i] < order[j]
	})
	return total, layers, order
}

// LayerBytes is what one layer's blocks hold.
type LayerBytes struct {
	Layer string
	Bytes int64
}

// AtPeak is the recording's highest point: the allocated bytes then, and what each layer's blocks
// allocated during the recording held then, largest first (the step's own memory at its peak:
// its activations and workspace, by layer).
func (tl *MemTimeline) AtPeak() (peak int64, layers []LayerBytes) {
	at := -1
	peak = tl.start
	for i, e := range tl.events {
		if e.Allocated > peak {
			peak, at = e.Allocated, i
		}
	}
	live := map[string]int64{}
	for i := 0; i <= at; i++ {
		e := tl.events[i]
		switch {
		case e.Free && !tl.prior[i]:
			live[layerOf(e.Tag)] -= e.Bytes
		case !e.Free:
			live[layerOf(e.Tag)] += e.Bytes
		}
	}
	for l, b := range live {
		if b > 0 {
			layers = append(layers, LayerBytes{l, b})
		}
	}
	sort.Slice(layers, func(i, j int) bool {
		if layers[i].Bytes != layers[j].Bytes {
			return layers[i].Bytes > layers[j].Bytes
		}
		return layers[i].Layer < layers[j].Layer
	})
	return peak, layers
}

// PeakReport is --memory-report's last part: the recorded step's peak and its own blocks live
// then, by layer (the n largest, the rest summed): where to look for activations to drop,
// checkpoint or recompute.
func PeakReport(tl *MemTimeline, step, n int) string {
	peak, layers := tl.AtPeak()
	var own int64
	for _, l := range layers {
		own += l.Bytes
	}
	var b strings.Builder
	fmt.Fprintf(&b, "step %d's peak: %s allocated, %s of it the step's own blocks (activations, workspace), by layer:\n",
		step, tensor.FormatBytes(peak), tensor.FormatBytes(own))
	var rest int64
	for i, l := range layers {
		if i >= n {
			rest += l.Bytes
			continue
		}
		fmt.Fprintf(&b, "  %-34s %12s  %5.1f%%\n", l.Layer, tensor.FormatBytes(l.Bytes), 100*float64(l.Bytes)/float64(max(own, 1)))
	}
	if rest > 0 {
		fmt.Fprintf(&b, "  %-34s %12s  %5.1f%%\n", fmt.Sprintf("(%d more layers)", len(layers)-n), tensor.FormatBytes(rest), 100*float64(rest)/float64(max(own, 1)))
	}
	return b.String()
}

// WritePNG draws the timeline: at most maxLayers layers get their own line (the largest), the
// rest are left to the total.
func (tl *MemTimeline) WritePNG(path, title string) error {
	const maxLayers = 16
	total, layers, order := tl.series()
	const gib = 1 << 30
	unit, unitName := float64(1<<20), "MiB"
	if total[len(total)-1] > gib || maxOf(total) > gib {
		unit, unitName = gib, "GiB"
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "allocation event in the step (allocs and frees in order)"
	p.Y.Label.Text = "allocated (" + unitName + ")"
	p.Legend.Top = true
	p.Legend.Left = true
	line := func(ys []float64) plotter.XYs {
		xy := make(plotter.XYs, len(ys))
		for i, y := range ys {
			xy[i].X, xy[i].Y = float64(i), y/unit
		}
		return xy
	}
	tot, err := plotter.NewLine(line(total))
	if err != nil {
		return err
	}
	tot.Color, tot.Width = color.Black, vg.Points(2)
	p.Add(tot)
	p.Legend.Add("allocated (all)", tot)
	for i, l := range order {
		if i == maxLayers {
			break
		}
		ln, err := plotter.NewLine(line(layers[l]))
		if err != nil {
			return err
		}
		ln.Color = plotutil.Color(i)
		ln.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		p.Add(ln)
		p.Legend.Add(l, ln)
	}
	p.X.Tick.Marker = Ticks{Integer: true}
	p.Y.Tick.Marker = Ticks{}
	// A margin above the title (gonum draws it against the top edge) and space below it.
	p.Title.Padding = vg.Points(8)
	img := vgimg.New(12*vg.Inch, 7*vg.Inch)
	p.Draw(draw.Crop(draw.New(img), 0, 0, 0, -vg.Points(10)))
	f, err := os.Create(path)
	if err == nil {
		_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("worker: --memory-plot: %w", err)
	}
	return nil
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// Events is the number of allocation events recorded.
func (tl *MemTimeline) Events() int { return len(tl.events) }
