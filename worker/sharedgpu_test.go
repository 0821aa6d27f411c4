package worker

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
)

// The ranks share one GPU only where every rank sees exactly one under the same
// CUDA_VISIBLE_DEVICES; otherwise the reason names the first rank that differs.
func TestSharedGPUFrom(t *testing.T) {
	for _, c := range []struct {
		reports []string
		one     bool
		why     string
	}{
		{[]string{"1\x00", "1\x00"}, true, "the same one GPU"},
		{[]string{"1\x000", "1\x000", "1\x000", "1\x000"}, true, "the same one GPU"},
		{[]string{"1\x000", "1\x001"}, false, `rank 1 sees CUDA_VISIBLE_DEVICES="1", rank 0 "0": not the same GPU`},
		{[]string{"1\x00", "2\x00"}, false, "rank 1 sees 2 GPUs"},
		{[]string{"-1\x00", "1\x00"}, false, "rank 0 could not count its GPUs"},
		{[]string{"x"}, false, "rank 0 could not count"},
	} {
		a := sharedGPUFrom(c.reports)
		if a.one != c.one || !strings.Contains(a.why, c.why) {
			t.Errorf("%q: %v %q, want %v with %q", c.reports, a.one, a.why, c.one, c.why)
		}
	}
}

// The ranks' agreement, where made, decides auto's copies over this rank's own count: ranks that
// each see one GPU, but not the same one, stay on the host path.
func TestIntraHostCopies_autoFollowsAgreement(t *testing.T) {
	defer func(f func() (int, error)) { visibleGPUs = f }(visibleGPUs)
	visibleGPUs = func() (int, error) { return 1, nil }
	tr := &Trainer{cfg: tinyGPT(t, "precision=fp16"), dev: mirrorDev{cpu.New()}, env: Env{WorldSize: 2, LocalWorldSize: 2}}
	if take, _ := tr.copiesByAuto(nil); !take {
		t.Fatal("one GPU seen, no agreement made: want copies")
	}
	a := sharedGPUFrom([]string{"1\x000", "1\x001"})
	tr.gpuAgree = &a
	if take, why := tr.copiesByAuto(nil); take || !strings.Contains(why, `CUDA_VISIBLE_DEVICES="1"`) {
		t.Errorf("ranks on GPUs 0 and 1: copies %v (%q), want the host path naming the difference", take, why)
	}
}
