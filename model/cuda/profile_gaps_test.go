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

// The profile's GEMM rows get their TFLOP/s from the sizes in their names (session 22's rows);
// other kernels none.
func TestProfileRate(t *testing.T) {
	for _, c := range []struct {
		name  string
		calls int
		ms    float64
		want  string
	}{
		{"gemm 16384x768x2304 b1 f16f16>f16 t00", 12, 1.015, "686 TFLOP/s"},
		{"lt epi512 768x768x16384 f16>f32", 12, 0.772, "300 TFLOP/s"},
		{"gemm 64x64x1024 b192 f16f16>f32 t01", 1, 1, "2 TFLOP/s"},
		{"k_flash_bwd_dkdv_ds", 12, 4.291, ""},
		{"gemm 1x1x1 b1", 1, 0, ""},
	} {
		if got := profileRate(c.name, c.calls, c.ms); got != c.want {
			t.Errorf("profileRate(%q, %d, %g) = %q, want %q", c.name, c.calls, c.ms, got, c.want)
		}
	}
}
