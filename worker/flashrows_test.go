package worker

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
)

// model.flash_forward_rows on the CPU device (no kernel blocks): unset is nothing to do, any value
// is refused in one line that names the key and the device.
func TestFlashForwardRows_cpuRefuses(t *testing.T) {
	dev := cpu.New()
	if err := flashForwardRows(dev, 0); err != nil {
		t.Fatalf("unset: %v", err)
	}
	err := flashForwardRows(dev, 128)
	if err == nil || !strings.Contains(err.Error(), "model.flash_forward_rows: 128 needs --device cuda") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v", err)
	}
}
