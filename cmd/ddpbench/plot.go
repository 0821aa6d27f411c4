package main

// ddpbench plot metrics.jsonl [-o out.png]: the loss curve (training and evaluation) and the
// throughput of a run, from ddptrain's --metrics file, drawn with gonum.org/v1/plot.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/goddp/goddp/worker/observe"
)

func init() {
	register("plot", subcommand{summary: "draw loss and throughput from a ddptrain --metrics file", run: runPlot})
}

func runPlot(args []string) error {
	fs := pflag.NewFlagSet("plot", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "PNG to write (default: the metrics file with .png)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: ddpbench plot metrics.jsonl [-o out.png]")
	}
	in := fs.Arg(0)
	if *out == "" {
		*out = strings.TrimSuffix(in, ".jsonl") + ".png"
	}
	m, err := readMetrics(in)
	if err != nil {
		return err
	}
	if err := plotMetrics(m, in, *out); err != nil {
		return err
	}
	fmt.Printf("%s: %d steps, %d evaluations\n", *out, len(m.train), len(m.eval))
	return nil
}

// metricLine is the part of a metrics line the plot reads (worker/observe/metrics.go writes them).
type metricLine struct {
	Event         string  `json:"event"`
	Step          int     `json:"step"`
	Loss          float64 `json:"loss"`
	EvalLoss      float64 `json:"eval_loss"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	TokensPerSec  float64 `json:"tokens_per_sec"`
}

type runMetrics struct {
	train, eval, rate plotter.XYs
	rateUnit          string
}

func readMetrics(path string) (*runMetrics, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &runMetrics{rateUnit: "samples/s"}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var samples, tokens plotter.XYs
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l metricLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		x := float64(l.Step)
		switch l.Event {
		case "step":
			m.train = append(m.train, plotter.XY{X: x, Y: l.Loss})
			samples = append(samples, plotter.XY{X: x, Y: l.SamplesPerSec})
			if l.TokensPerSec > 0 {
				tokens = append(tokens, plotter.XY{X: x, Y: l.TokensPerSec})
			}
		case "eval":
			m.eval = append(m.eval, plotter.XY{X: x, Y: l.EvalLoss})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(m.train) == 0 {
		return nil, fmt.Errorf("%s: no step lines (is it a ddptrain --metrics file?)", path)
	}
	m.rate = samples
	if len(tokens) == len(samples) {
		m.rate, m.rateUnit = tokens, "tokens/s"
	}
	return m, nil
}

// plotMetrics writes two panels, loss over steps and throughput over steps, into one PNG.
func plotMetrics(m *runMetrics, title, out string) error {
	loss := plot.New()
	loss.Title.Text = title
	loss.Y.Label.Text = "loss"
	tr, err := plotter.NewLine(m.train)
	if err != nil {
		return err
	}
	tr.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	loss.Add(tr)
	loss.Legend.Add("train", tr)
	if len(m.eval) > 0 {
		ev, pts, err := plotter.NewLinePoints(m.eval)
		if err != nil {
			return err
		}
		red := color.RGBA{R: 214, G: 39, B: 40, A: 255}
		ev.Color, pts.Color = red, red
		loss.Add(ev, pts)
		loss.Legend.Add("eval", ev, pts)
	}
	loss.Add(plotter.NewGrid())
	// The legend sits top right, above the data: the y range gets a quarter more room on top.
	loss.Legend.Top = true
	loss.Y.Max = headroom(m.train, m.eval)
	loss.X.Tick.Marker = stepTicks
	loss.Y.Tick.Marker = valueTicks

	rate := plot.New()
	rate.X.Label.Text = "optimizer step"
	rate.Y.Label.Text = m.rateUnit
	rate.Y.Min = 0
	rl, err := plotter.NewLine(m.rate)
	if err != nil {
		return err
	}
	rl.Color = color.RGBA{G: 128, A: 255}
	rate.Add(rl, plotter.NewGrid())
	rate.X.Tick.Marker = stepTicks
	rate.Y.Tick.Marker = valueTicks
	// One x range for both panels, so a step lines up.
	rate.X.Min, rate.X.Max = math.Min(loss.X.Min, rate.X.Min), math.Max(loss.X.Max, rate.X.Max)
	loss.X.Min, loss.X.Max = rate.X.Min, rate.X.Max

	const w, h = 10 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	cells := plot.Align([][]*plot.Plot{{loss}, {rate}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(10), PadRight: vg.Points(16), PadBottom: vg.Points(4), PadLeft: vg.Points(4)}, dc)
	loss.Draw(cells[0][0])
	rate.Draw(cells[1][0])
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// headroom is the top of the loss panel: a quarter of the data's range above its largest value,
// where the legend goes.
func headroom(series ...plotter.XYs) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, xy := range series {
		for _, p := range xy {
			lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
		}
	}
	if math.IsInf(hi, -1) {
		return 1
	}
	if hi == lo {
		return hi + math.Max(math.Abs(hi)*0.25, 1)
	}
	return hi + (hi-lo)*0.25
}

// The axes' ticks (observe.Ticks, as the memory plot's): steps as integers, about 6 intervals;
// values with the decimals their spacing needs, about 8.
var (
	stepTicks  = observe.Ticks{Integer: true, Intervals: 6}
	valueTicks = observe.Ticks{Intervals: 8}
)
