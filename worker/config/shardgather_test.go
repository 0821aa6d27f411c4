package config

import (
	"strings"
	"testing"
)

// ddp.shard_gather: auto, host and device are taken; anything else is refused naming the key and
// the values; device is refused without ddp.shard_optimizer.
func TestValidate_shardGather(t *testing.T) {
	for _, v := range []ShardGather{ShardGatherAuto, ShardGatherHost, ShardGatherDevice} {
		c := Default()
		if err := c.Set("ddp.shard_gather=" + string(v)); err != nil || c.DDP.ShardGather != v {
			t.Errorf("%s: %v (read as %q)", v, err, c.DDP.ShardGather)
		}
	}
	c := Default()
	if err := c.Set("ddp.shard_gather=gpu"); err == nil || !strings.Contains(err.Error(), `ddp.shard_gather: "gpu": want one of auto, host, device`) {
		t.Errorf("gpu: %v, want the key and its values", err)
	}
	for _, tc := range []struct {
		sets []string
		want string // "" for no error
	}{
		{[]string{"precision=fp16", "ddp.shard_optimizer=true", "ddp.shard_gather=device"}, ""},
		{[]string{"precision=fp16", "ddp.shard_gather=host"}, ""},
		{[]string{"precision=fp16", "ddp.shard_gather=device"}, "ddp.shard_gather: device needs ddp.shard_optimizer: true"},
	} {
		_, err := Load(writeYAML(t, minimalMLP), tc.sets)
		if tc.want == "" && err != nil {
			t.Errorf("%v: %v", tc.sets, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.sets, err, tc.want)
		}
	}
}
