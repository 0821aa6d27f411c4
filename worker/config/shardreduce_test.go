package config

import (
	"strings"
	"testing"
)

// ddp.shard_reduce: auto, host and device are taken; anything else is refused naming the key and
// the values; device is refused without ddp.shard_optimizer.
func TestValidate_shardReduce(t *testing.T) {
	for _, v := range []ShardReduce{ShardReduceAuto, ShardReduceHost, ShardReduceDevice} {
		c := Default()
		if err := c.Set("ddp.shard_reduce=" + string(v)); err != nil || c.DDP.ShardReduce != v {
			t.Errorf("%s: %v (read as %q)", v, err, c.DDP.ShardReduce)
		}
	}
	c := Default()
	if err := c.Set("ddp.shard_reduce=gpu"); err == nil || !strings.Contains(err.Error(), `ddp.shard_reduce: "gpu": want one of auto, host, device`) {
		t.Errorf("gpu: %v, want the key and its values", err)
	}
	for _, tc := range []struct {
		sets []string
		want string // "" for no error
	}{
		{[]string{"precision=fp16", "ddp.shard_optimizer=true", "ddp.shard_reduce=device"}, ""},
		{[]string{"precision=fp16", "ddp.shard_reduce=host"}, ""},
		{[]string{"precision=fp16", "ddp.shard_reduce=device"}, "ddp.shard_reduce: device needs ddp.shard_optimizer: true"},
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
