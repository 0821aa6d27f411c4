package config

import "gopkg.in/yaml.v3"

// OverlapGather is `ddp.overlap_gather`: under ddp.shard_optimizer, whether the all-gather of the
// updated weights after each optimizer step overlaps the next forward (ddp/gather_overlap.go:
// each layer waits for its own bucket) or finishes before it. The same bits either way.
type OverlapGather string

const (
	// OverlapAuto: on where it measured faster (--device cuda with fp16 on the f16 wire: the
	// staged path, whose host cores are idle while the GPU computes), off elsewhere (the CPU
	// device: within noise; a device's fp32 and bf16 sharded paths: not yet run on a GPU with it).
	// Worker's overlapGather decides.
	OverlapAuto OverlapGather = "auto"
	OverlapOn   OverlapGather = "on"
	OverlapOff  OverlapGather = "off"
)

var overlapGathers = choices[OverlapGather]{key: "ddp.overlap_gather", values: []OverlapGather{OverlapAuto, OverlapOn, OverlapOff},
	aliases: map[string]OverlapGather{"": OverlapAuto, "true": OverlapOn, "false": OverlapOff}}

// ParseOverlapGather reads `ddp.overlap_gather`: auto (or ""), on (true) or off (false).
func ParseOverlapGather(s string) (OverlapGather, error) { return overlapGathers.parse(s) }

func (v *OverlapGather) setText(s string) error           { return set(v, s, ParseOverlapGather) }
func (v *OverlapGather) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
