package config

import "gopkg.in/yaml.v3"

// ShardMaster is `ddp.shard_master`: under ddp.shard_optimizer with mixed precision (fp16, bf16),
// whether each rank keeps the f32 master weights of its shard only (and the norms' gains and
// biases, which forward reads) instead of the whole master (model/master_shard.go). The same
// bits either way: the same update on the same values; only where the other ranks' master lives.
type ShardMaster string

const (
	// ShardMasterAuto: on with the CPU device, and with --device cuda under fp16 (the whole
	// -tags cuda suite and stage 3's rows ran with it, session 17); off for cuda under bf16, not
	// yet run on a GPU. Worker's shardMaster decides.
	ShardMasterAuto ShardMaster = "auto"
	// ShardMasterOn: on with any device (cuda bf16: not yet run on a GPU); refused under fp32, where
	// forward reads the f32 master as the weights, and without ddp.shard_optimizer.
	ShardMasterOn  ShardMaster = "on"
	ShardMasterOff ShardMaster = "off"
)

var shardMasters = choices[ShardMaster]{key: "ddp.shard_master", values: []ShardMaster{ShardMasterAuto, ShardMasterOn, ShardMasterOff},
	aliases: map[string]ShardMaster{"": ShardMasterAuto, "true": ShardMasterOn, "false": ShardMasterOff}}

// ParseShardMaster reads `ddp.shard_master`: auto (or ""), on (true) or off (false).
func ParseShardMaster(s string) (ShardMaster, error) { return shardMasters.parse(s) }

func (v *ShardMaster) setText(s string) error           { return set(v, s, ParseShardMaster) }
func (v *ShardMaster) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
