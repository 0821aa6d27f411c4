package cuda

import (
	"math"
	"testing"
)

// GODDP_LT_TUNE keeps the heuristic's first unless another candidate is more than the margin
// faster; candidates that could not run (+Inf) never win; with nothing timed the first stays.
func TestLtTunePick(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		ms   []float64
		want int
	}{
		{[]float64{1.0, 0.9, 0.95}, 1},     // 10% faster: taken
		{[]float64{1.0, 0.98}, 0},          // within 3%: the first stays
		{[]float64{1.0, 0.97, 0.5}, 2},     // the fastest, not the first faster one
		{[]float64{inf, 0.5, 0.6}, 1},      // the first could not run
		{[]float64{1.0, inf, inf}, 0},      // nothing else ran
		{[]float64{inf, inf}, 0},           // nothing timed
		{[]float64{0.5, 0.5, 0.5}, 0},      // a tie: the first
		{[]float64{0.064, 0.031, 0.04}, 1}, // 768x768x16384's hope
	} {
		if got := ltTunePick(c.ms, 0.03); got != c.want {
			t.Errorf("ltTunePick(%v) = %d, want %d", c.ms, got, c.want)
		}
	}
}
