package launcher

import (
	"os"
	"strings"
	"testing"
)

func TestCheckNProc(t *testing.T) {
	two := HostLimits{CPUs: 2}
	for _, tt := range []struct {
		n    int
		h    HostLimits
		over bool
		say  string // "" = accepted
	}{
		{1, two, false, ""},
		{8, two, false, ""}, // 4 per CPU
		{9, two, false, "--oversubscribe"},
		{100000, two, false, "more than 4 workers per CPU on this host's 2 CPU(s) (at most 8)"},
		{100000, two, true, ""},
		{0, two, true, "at least 1"},
		{-3, two, false, "at least 1"},
		{40, HostLimits{CPUs: 64, NProc: 40}, false, "RLIMIT_NPROC"},
		{40, HostLimits{CPUs: 64, NProc: 40}, true, "RLIMIT_NPROC"}, // no flag lifts the kernel's limit
		{39, HostLimits{CPUs: 64, NProc: 40}, false, ""},
		{4, HostLimits{CPUs: 0}, false, ""}, // an unknown CPU count counts as one
	} {
		err := CheckNProc(tt.n, tt.h, tt.over)
		switch {
		case tt.say == "" && err != nil:
			t.Errorf("CheckNProc(%d, %+v, %v) = %v, want accepted", tt.n, tt.h, tt.over, err)
		case tt.say != "" && (err == nil || !strings.Contains(err.Error(), tt.say) || !strings.Contains(err.Error(), "--nproc-per-node")):
			t.Errorf("CheckNProc(%d, %+v, %v) = %v, want an error naming --nproc-per-node and %q", tt.n, tt.h, tt.over, err, tt.say)
		case err != nil && ExitCode(err) != ExitUsage:
			t.Errorf("CheckNProc(%d): exit code %d, want 2", tt.n, ExitCode(err))
		}
	}
	if h := ThisHost(); h.CPUs < 1 {
		t.Errorf("ThisHost: %+v", h)
	}
}

// Run refuses too many workers before starting any (the Go API has the same rule as the flag).
func TestRun_tooManyWorkers(t *testing.T) {
	j := newFakeJob(t)
	o := j.options(9, "pid", nil)
	o.Limits = &HostLimits{CPUs: 2}
	if err := Run(t.Context(), o); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--oversubscribe") {
		t.Fatalf("Run: %v, want a usage error naming --oversubscribe", err)
	}
	if _, err := os.Stat(j.path("pid", 0, 0)); err == nil {
		t.Error("a worker ran")
	}
	o.Oversubscribe = true
	if err := Run(t.Context(), o); err != nil {
		t.Fatalf("Run with Oversubscribe: %v", err)
	}
}
