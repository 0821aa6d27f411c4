package config

import "gopkg.in/yaml.v3"

// ShardGather is `ddp.shard_gather`: under ddp.shard_optimizer on the sharded staged path
// (--device cuda, fp16 on the f16 wire), how each step's updated f16 weights reach the other
// ranks: through pinned memory and the host ring (host), or copied between the devices of one
// host (device: ddp/shard_peer.go, CUDA IPC, one meeting of the ranks a step). The same bits
// either way.
type ShardGather string

const (
	// ShardGatherAuto: device where it applies (one host, several ranks sharing its one GPU, the
	// sharded staged path on a device that maps its peers' memory), else host.
	ShardGatherAuto ShardGather = "auto"
	// ShardGatherHost: pinned memory and the host ring (ddp/shard_gpu.go).
	ShardGatherHost ShardGather = "host"
	// ShardGatherDevice: copies between the devices; every rank on one host (run on an H100 shared by
	// 2 and 4 workers, session 20).
	ShardGatherDevice ShardGather = "device"
)

var shardGathers = choices[ShardGather]{key: "ddp.shard_gather", values: []ShardGather{ShardGatherAuto, ShardGatherHost, ShardGatherDevice},
	aliases: map[string]ShardGather{"": ShardGatherAuto}}

// ParseShardGather reads `ddp.shard_gather`: auto (or ""), host or device.
func ParseShardGather(s string) (ShardGather, error) { return shardGathers.parse(s) }

func (v *ShardGather) setText(s string) error           { return set(v, s, ParseShardGather) }
func (v *ShardGather) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
