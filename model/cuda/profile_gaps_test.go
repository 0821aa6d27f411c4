package cuda

import (
	"strings"
	"testing"
)

// The gap table sums every gap and ranks the kernel pairs by the time between them, each pair's
// gaps added together and counted.
func TestProfileGaps(t *testing.T) {
	names := []string{"k_adamw", "k_embedding", "gemm", "k_xent", "gemm", "k_xent"}
	gaps := []float64{0.5, 0.01, 0.2, 0.02, 0.25}
	out := profileGaps(names, gaps, 2)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a sum and two pairs:\n%s", len(lines), out)
	}
	if !strings.Contains(lines[0], "0.980 ms in 5 gaps") {
		t.Errorf("sum line %q: want 0.980 ms in 5 gaps", lines[0])
	}
	for i, want := range []string{"0.500 ms     1x  k_adamw -> k_embedding", "0.450 ms     2x  gemm -> k_xent"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("row %d %q: want %q", i+1, lines[i+1], want)
		}
	}
	if out := profileGaps([]string{"k"}, nil, 3); !strings.Contains(out, "0.000 ms in 0 gaps") {
		t.Errorf("one kernel: %q", out)
	}
}
