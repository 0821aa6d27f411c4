package config

import (
	"strings"
	"testing"
)

// ddp.intra_host: auto, host and device are taken (auto and host with ddp.hierarchical); device
// with ddp.hierarchical is refused naming both; anything else is refused naming the key and the
// values. (device on the CPU device is refused by the trainer: worker's TestTrainer_intraHostDevice.)
func TestValidate_intraHost(t *testing.T) {
	base := []string{"model.kind=mlp", "model.widths=[784,32,10]", "train.epochs=1", "train.micro_batch=8",
		"train.lr=0.01", "data.kind=mnist"}
	load := func(sets ...string) error {
		c := Default()
		for _, kv := range append(append([]string{}, base...), sets...) {
			if err := c.Set(kv); err != nil {
				return err
			}
		}
		return c.Resolved().Validate()
	}
	for _, ok := range [][]string{nil, {"ddp.intra_host=auto"}, {"ddp.intra_host=host", "ddp.hierarchical=true"}, {"ddp.intra_host=device"}} {
		if err := load(ok...); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	if err := load("ddp.intra_host=device", "ddp.hierarchical=true"); err == nil || !strings.Contains(err.Error(), "ddp.intra_host: device with ddp.hierarchical") {
		t.Errorf("device with hierarchical: %v, want a refusal naming both", err)
	}
	if err := load("ddp.intra_host=nvlink"); err == nil || !strings.Contains(err.Error(), `ddp.intra_host: "nvlink": want one of auto, host, device`) {
		t.Errorf("nvlink: %v, want the key and its values", err)
	}
}
