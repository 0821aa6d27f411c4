package observe

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// Ticks labels a plot axis as a person would in a report: major ticks at a 1-2-5 spacing, about
// Intervals of them over the range, every one labelled — integers on an axis of steps or events
// ("250", never "250.00"), values with as many decimals as the spacing needs — and four minor
// ticks between. The memory plot and `ddpbench plot` both draw their axes with it.
type Ticks struct {
	Integer   bool // a count: spacing at least 1, labels without decimals
	Intervals int  // about how many major intervals (0: 8)
}

// Ticks implements plot.Ticker.
func (t Ticks) Ticks(lo, hi float64) []plot.Tick {
	want := t.Intervals
	if want <= 0 {
		want = 8
	}
	step := NiceStep(hi-lo, want)
	dec := 0
	if t.Integer {
		step = math.Max(1, step)
	} else if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	var out []plot.Tick
	first := math.Ceil(lo/step) * step
	for i := 0; ; i++ {
		v := first + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', dec, 64)})
		for j := 1; j < 5; j++ {
			if m := v + float64(j)*step/5; m <= hi {
				out = append(out, plot.Tick{Value: m})
			}
		}
	}
	return out
}

// NiceStep is the tick spacing for about want intervals over span: 1, 2 or 5 times a power of ten.
func NiceStep(span float64, want int) float64 {
	if span <= 0 || want < 1 {
		return 1
	}
	raw := span / float64(want)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
