package config

import (
	"strings"
	"testing"
)

// ddp.shard_master: auto, on, off (and YAML's true/false) are taken; anything else is refused
// naming the key and the values; on is refused without ddp.shard_optimizer and under fp32.
func TestValidate_shardMaster(t *testing.T) {
	for v, want := range map[string]ShardMaster{"auto": ShardMasterAuto, "on": ShardMasterOn, "off": ShardMasterOff, "true": ShardMasterOn, "false": ShardMasterOff} {
		c := Default()
		if err := c.Set("ddp.shard_master=" + v); err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		if c.DDP.ShardMaster != want {
			t.Errorf("%s: read as %q, want %q", v, c.DDP.ShardMaster, want)
		}
	}
	c := Default()
	if err := c.Set("ddp.shard_master=maybe"); err == nil || !strings.Contains(err.Error(), `ddp.shard_master: "maybe": want one of auto, on, off`) {
		t.Errorf("maybe: %v, want the key and its values", err)
	}
	for _, tc := range []struct {
		sets []string
		want string // "" for no error
	}{
		{[]string{"precision=fp16", "ddp.shard_optimizer=true", "ddp.shard_master=on"}, ""},
		{[]string{"precision=bf16", "ddp.shard_optimizer=true", "ddp.shard_master=on"}, ""},
		{[]string{"precision=fp32", "ddp.shard_optimizer=true", "ddp.shard_master=auto"}, ""},
		{[]string{"precision=fp16", "ddp.shard_master=on"}, "ddp.shard_master: on needs ddp.shard_optimizer: true"},
		{[]string{"precision=fp32", "ddp.shard_optimizer=true", "ddp.shard_master=on"}, "ddp.shard_master: on under precision fp32"},
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
