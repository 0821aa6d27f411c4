package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// IntraHost is `ddp.intra_host`: how gradients are reduced among the ranks of one host.
type IntraHost string

const (
	IntraHostAuto   IntraHost = "auto"   // copies where several ranks of one host share its one GPU (measured), else host (worker/intrahost.go: copiesByAuto)
	IntraHostHost   IntraHost = "host"   // the host planes: f32 or f16 through shared memory
	IntraHostDevice IntraHost = "device" // the engine all-reduces on the device over CUDA IPC buffers (ddp/engine_device.go): correct on a GPU, slower than host on a shared one
	// IntraHostCopies: the staged path's f16 all-reduce by copies between the devices, every rank
	// on one host (ddp/engine_peer.go: a sum in the ring's order on each rank's segment, then the
	// peers' segments copied; the host ring's bits, no pinned memory, no kernel that waits on
	// another process). --device cuda with the f16 wire, unsharded (the sharded step has
	// ddp.shard_reduce: device). Measured on an H100 shared by 2 and 4 workers (session 22): 46.00
	// and 93.93 ms a step against the host path's 55.66 and 123.86 (1.06× and 1.08× N × one
	// worker; under MPS 0.93× and 0.94×); auto takes it where the ranks share one GPU. Ranks on
	// several GPUs of one host take it only when chosen: not yet run on a multi-GPU host.
	IntraHostCopies IntraHost = "copies"
)

var intraHosts = choices[IntraHost]{key: "ddp.intra_host", values: []IntraHost{IntraHostAuto, IntraHostHost, IntraHostDevice, IntraHostCopies},
	aliases: map[string]IntraHost{"": IntraHostAuto}}

// ParseIntraHost reads `ddp.intra_host`: auto (or ""), host, device or copies.
func ParseIntraHost(s string) (IntraHost, error) { return intraHosts.parse(s) }

// validateIntraHost checks ddp.intra_host and ddp.hierarchical (copies: also validateCopies).
// device (the engine's all-reduce over CUDA IPC buffers, ddp/engine_device.go; measured only on a
// shared GPU) is the user's explicit choice, auto never takes it; device needs --device
// cuda (the trainer refuses it otherwise, when the device is known). Across hosts it is hierarchical by itself (the device
// inside each host, the ring between hosts), so it is not combined with ddp.hierarchical (whose
// rings inside the host are the host planes).
func (d *DDPConfig) validateIntraHost() error {
	v, err := ParseIntraHost(string(d.IntraHost))
	if err != nil {
		return err
	}
	if v == IntraHostDevice && d.Hierarchical {
		return fmt.Errorf("ddp.intra_host: device with ddp.hierarchical: device is hierarchical across hosts by itself (the device inside each host, the ring between hosts) and ddp.hierarchical reduces inside the host on the host planes; choose one")
	}
	if v == IntraHostCopies && d.Hierarchical {
		return fmt.Errorf("ddp.intra_host: copies with ddp.hierarchical: copies reduces among the ranks of one host only, ddp.hierarchical across hosts; choose one")
	}
	return nil
}

// validateCopies checks what ddp.intra_host: copies needs of the rest of the configuration: the
// f16 wire (the staged path's) and an unsharded step (the sharded one reduces by copies with
// ddp.shard_reduce: device). --device cuda and one host are the trainer's to check.
func (c *Config) validateCopies() error {
	if v, err := ParseIntraHost(string(c.DDP.IntraHost)); err != nil || v != IntraHostCopies {
		return nil // validateIntraHost reports a bad value
	}
	if w := c.WireFormat(); w != WireF16 {
		return fmt.Errorf("ddp.intra_host: copies needs the f16 wire (precision fp16, or ddp.wire: f16); this run's wire is %s", w)
	}
	if c.DDP.ShardOptimizer {
		return fmt.Errorf("ddp.intra_host: copies with ddp.shard_optimizer: the sharded step reduce-scatters by device copies with ddp.shard_reduce: device")
	}
	return nil
}

func (v *IntraHost) setText(s string) error           { return set(v, s, ParseIntraHost) }
func (v *IntraHost) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
