package cuda

// profile_gaps.go: the pure half of Device.ProfileStop (cuda.go), built without the cuda tag so
// its test runs everywhere.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// profileGaps is ProfileStop's second table: gaps[i] (ms) is the time from kernel names[i]'s end
// event to names[i+1]'s start event. It sums them, then lists the pairs (after → before) with
// the most of that time, top rows of them, each with its count.
func profileGaps(names []string, gaps []float64, top int) string {
	type pair struct {
		after, before string
		ms            float64
		n             int
	}
	by := map[[2]string]*pair{}
	var sum float64
	for i, g := range gaps {
		sum += g
		k := [2]string{names[i], names[i+1]}
		p := by[k]
		if p == nil {
			p = &pair{after: k[0], before: k[1]}
			by[k] = p
		}
		p.ms += g
		p.n++
	}
	ps := make([]*pair, 0, len(by))
	for _, p := range by {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].ms != ps[j].ms {
			return ps[i].ms > ps[j].ms
		}
		return ps[i].after+ps[i].before < ps[j].after+ps[j].before
	})
	var b strings.Builder
	fmt.Fprintf(&b, "between kernels (copies, memsets, waits for the host): %.3f ms in %d gaps; the largest, after -> before:\n", sum, len(gaps))
	for _, p := range ps[:min(top, len(ps))] {
		fmt.Fprintf(&b, "  %9.3f ms %5dx  %s -> %s\n", p.ms, p.n, p.after, p.before)
	}
	return b.String()
}

// gemmLabel matches the profile's GEMM rows: "gemm MxNxK bB ..." (blas.go) and "lt epiE MxNxK ..."
// (lt.go).
var gemmLabel = regexp.MustCompile(`^(?:gemm|lt epi\d+) (\d+)x(\d+)x(\d+)(?: b(\d+))?`)

// profileRate is a profile row's rate where its name says its work: a GEMM row's TFLOP/s
// (2·M·N·K·batch a call, calls of them in ms); "" for other kernels.
func profileRate(name string, calls int, ms float64) string {
	m := gemmLabel.FindStringSubmatch(name)
	if m == nil || ms <= 0 {
		return ""
	}
	f := 2.0 * float64(calls)
	for _, s := range m[1:4] {
		v, _ := strconv.Atoi(s)
		f *= float64(v)
	}
	if m[4] != "" {
		b, _ := strconv.Atoi(m[4])
		f *= float64(b)
	}
	return fmt.Sprintf("%.0f TFLOP/s", f/(ms*1e-3)/1e12)
}
