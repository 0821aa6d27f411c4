package config

import "gopkg.in/yaml.v3"

// ShardReduce is `ddp.shard_reduce`: under ddp.shard_optimizer on the sharded staged path
// (--device cuda, fp16 on the f16 wire), how each step's f16 gradients are reduce-scattered:
// through pinned memory and the host ring (host), or by copies between the devices of one host
// and a sum on each device in the ring's order (device: ddp/shard_peer_reduce.go, CUDA IPC, one
// meeting of the ranks a bucket and one a step). The same bits either way.
type ShardReduce string

const (
	// ShardReduceAuto: device where ddp.shard_gather took device copies on one GPU shared by the
	// ranks of one host (measured, session 22: the sharded step 46.67 ms at W = 2 against 50.91
	// through the host), else host (worker/intrahost.go).
	ShardReduceAuto ShardReduce = "auto"
	// ShardReduceHost: pinned memory and the host ring (ddp/shard_gpu.go).
	ShardReduceHost ShardReduce = "host"
	// ShardReduceDevice: copies between the devices; every rank on one host. Its first GPU run
	// (session 21) summed wrong at two channels (fixed; its training test passed in session 22).
	ShardReduceDevice ShardReduce = "device"
)

var shardReduces = choices[ShardReduce]{key: "ddp.shard_reduce", values: []ShardReduce{ShardReduceAuto, ShardReduceHost, ShardReduceDevice},
	aliases: map[string]ShardReduce{"": ShardReduceAuto}}

// ParseShardReduce reads `ddp.shard_reduce`: auto (or ""), host or device.
func ParseShardReduce(s string) (ShardReduce, error) { return shardReduces.parse(s) }

func (v *ShardReduce) setText(s string) error           { return set(v, s, ParseShardReduce) }
func (v *ShardReduce) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
