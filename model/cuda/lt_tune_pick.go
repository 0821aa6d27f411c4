package cuda

import "math"

// lt_tune_pick.go: GODDP_LT_TUNE's choice among timed candidates (lt_tune.go), apart from the
// cgo so that it is tested everywhere.

// ltTunePick is the index to keep among the candidates' times ms (+Inf: could not run): the
// fastest, unless the first (the heuristic's choice) is within margin of it or no time is finite.
func ltTunePick(ms []float64, margin float64) int {
	best := 0
	for i, t := range ms {
		if t < ms[best] {
			best = i
		}
	}
	if math.IsInf(ms[best], 1) || ms[0] <= ms[best]*(1+margin) {
		return 0
	}
	return best
}
