package worker

import (
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce/link"
)

// A checkpoint due while the previous one is being written waits half the collective timeout
// (ddp.timeout, else allreduce's default) before it is skipped; alone, as long as it takes.
func TestCheckpointPatience(t *testing.T) {
	tr := &Trainer{cfg: &Config{}, env: Env{WorldSize: 2}}
	if got := tr.checkpointPatience(); got != link.DefaultTimeout/2 {
		t.Errorf("default: %v, want half of link.DefaultTimeout %v", got, link.DefaultTimeout)
	}
	tr.cfg.DDP.Timeout.D = 3 * time.Second
	if got := tr.checkpointPatience(); got != 1500*time.Millisecond {
		t.Errorf("ddp.timeout 3s: %v, want 1.5s", got)
	}
	tr.env.WorldSize = 1
	if got := tr.checkpointPatience(); got < time.Hour {
		t.Errorf("world 1: %v, want no bound", got)
	}
}
