package config

import (
	"strings"
	"testing"
)

// ddp.overlap_gather: auto, on, off (and YAML's true/false for on/off) are taken; anything else is
// refused naming the key and the values.
func TestValidate_overlapGather(t *testing.T) {
	for v, want := range map[string]OverlapGather{"auto": OverlapAuto, "on": OverlapOn, "off": OverlapOff, "true": OverlapOn, "false": OverlapOff} {
		c := Default()
		if err := c.Set("ddp.overlap_gather=" + v); err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		if c.DDP.OverlapGather != want {
			t.Errorf("%s: read as %q, want %q", v, c.DDP.OverlapGather, want)
		}
	}
	c := Default()
	err := c.Set("ddp.overlap_gather=maybe")
	if err == nil || !strings.Contains(err.Error(), `ddp.overlap_gather: "maybe": want one of auto, on, off`) {
		t.Errorf("maybe: %v, want the key and its values", err)
	}
}
