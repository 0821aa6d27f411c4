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
	if err := load("ddp.intra_host=nvlink"); err == nil || !strings.Contains(err.Error(), `ddp.intra_host: "nvlink": want one of auto, host, device, copies`) {
		t.Errorf("nvlink: %v, want the key and its values", err)
	}
}

// ddp.intra_host: copies is taken with the f16 wire (precision fp16's, or ddp.wire: f16 under
// fp32), unsharded, on one host's rings; refused, in one line naming the key, on another wire,
// with ddp.shard_optimizer (naming ddp.shard_reduce: device) and with ddp.hierarchical. (--device
// cuda and one host: worker's TestIntraHostCopies_refusals.)
func TestValidate_intraHostCopies(t *testing.T) {
	base := []string{"model.kind=mlp", "model.widths=[784,32,10]", "train.epochs=1", "train.micro_batch=8",
		"train.lr=0.01", "data.kind=mnist", "ddp.intra_host=copies"}
	for _, c := range []struct {
		sets []string
		want string // "" for no error
	}{
		{[]string{"precision=fp16"}, ""},
		{[]string{"precision=fp32", "ddp.wire=f16"}, ""},
		{[]string{"precision=fp32"}, "ddp.intra_host: copies needs the f16 wire (precision fp16, or ddp.wire: f16); this run's wire is f32"},
		{[]string{"precision=bf16"}, "ddp.intra_host: copies needs the f16 wire"},
		{[]string{"precision=fp16", "ddp.shard_optimizer=true"}, "ddp.intra_host: copies with ddp.shard_optimizer: the sharded step reduce-scatters by device copies with ddp.shard_reduce: device"},
		{[]string{"precision=fp16", "ddp.hierarchical=true"}, "ddp.intra_host: copies with ddp.hierarchical"},
	} {
		cfg := Default()
		var err error
		for _, kv := range append(append([]string{}, base...), c.sets...) {
			if err = cfg.Set(kv); err != nil {
				break
			}
		}
		if err == nil {
			err = cfg.Resolved().Validate()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.sets, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v; want %q", c.sets, err, c.want)
		}
	}
}
