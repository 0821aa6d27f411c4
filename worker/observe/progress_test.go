package observe

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgress_plainLines(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(100, 0, &buf, false)
	p.Update(50, 0.41234, 1234.5, "scale 65536")
	p.Log("eval", "loss", 0.1)
	p.Finish()
	out := buf.String()
	for _, want := range []string{"msg=train", "step=50", "of=100", "loss=0.4123", "samples_per_sec=1234.5", "eta=", `extra="scale 65536"`, "msg=eval"} {
		if !strings.Contains(out, want) {
			t.Errorf("plain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != 2 {
		t.Errorf("want 2 lines:\n%s", out)
	}
}

func TestProgress_barOnlyRank0(t *testing.T) {
	defer func(d time.Duration) { progressThrottle = d }(progressThrottle)
	progressThrottle = 0
	var buf bytes.Buffer
	p := newProgress(10, 0, &buf, true)
	p.Update(5, 1.5, 100, "")
	p.Finish()
	p.Finish()
	if out := buf.String(); !strings.Contains(out, "loss 1.5000") || !strings.Contains(out, "5/10") {
		t.Errorf("bar output:\n%q", out)
	}
	buf.Reset()
	q := newProgress(10, 1, &buf, true)
	q.Update(5, 1.5, 100, "")
	q.Finish()
	if buf.Len() != 0 {
		t.Errorf("rank 1 drew: %q", buf.String())
	}
	q.Log("hello")
	if !strings.Contains(buf.String(), "msg=hello") {
		t.Errorf("rank 1 Log: %q", buf.String())
	}
}

// After a resume at step 75, the ETA is the rate of the steps trained since (issue 29, item 6),
// not the checkpoint's 75 steps counted as done in no time.
func TestProgress_etaFromTheResumedRate(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(100, 0, &buf, false)
	p.Start(75)
	time.Sleep(50 * time.Millisecond)
	eta, ok := p.eta(80) // 5 steps in ≥ 50 ms: 20 left take ≥ 200 ms
	if !ok || eta < 200*time.Millisecond {
		t.Errorf("ETA at step 80 of 100, 5 steps after a resume at 75 in 50 ms: %v, want ≥ 200ms", eta)
	}
	if _, ok := p.eta(75); ok {
		t.Error("an ETA before a step was trained")
	}
}

// The terminal bar after a resume at step 75 of 100 counts the 25 steps this process trains (its
// predicted time is their rate) and says which step of the run it is at.
func TestProgress_barAfterResume(t *testing.T) {
	defer func(d time.Duration) { progressThrottle = d }(progressThrottle)
	progressThrottle = 0
	var buf bytes.Buffer
	p := newProgress(100, 0, &buf, true)
	p.Start(75)
	p.Update(80, 1.5, 100, "")
	p.Finish()
	if out := buf.String(); !strings.Contains(out, "5/25") || !strings.Contains(out, "step 80/100") || strings.Contains(out, "80/100 [") {
		t.Errorf("bar after a resume at 75, at step 80 of 100:\n%q", out)
	}
}
