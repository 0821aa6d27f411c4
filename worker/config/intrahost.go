package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// IntraHost is `ddp.intra_host`: how gradients are reduced among the ranks of one host.
type IntraHost string

const (
	IntraHostAuto   IntraHost = "auto"   // the host path, until the device path has been measured faster on a GPU
	IntraHostHost   IntraHost = "host"   // the host planes: f32 or f16 through shared memory
	IntraHostDevice IntraHost = "device" // an all-reduce over CUDA IPC buffers (model/cuda): not yet run on a GPU
)

var intraHosts = choices[IntraHost]{key: "ddp.intra_host", values: []IntraHost{IntraHostAuto, IntraHostHost, IntraHostDevice},
	aliases: map[string]IntraHost{"": IntraHostAuto}}

// ParseIntraHost reads `ddp.intra_host`: auto (or ""), host or device.
func ParseIntraHost(s string) (IntraHost, error) { return intraHosts.parse(s) }

// validateIntraHost checks ddp.intra_host and ddp.hierarchical. device is refused: the device
// all-reduce (model/cuda's IPC all-reduce, `ddpbench allreduce --device cuda`) is type-checked
// but has not yet run on a GPU, and the engine does not call it yet.
func (d *DDPConfig) validateIntraHost() error {
	v, err := ParseIntraHost(string(d.IntraHost))
	if err != nil {
		return err
	}
	if v == IntraHostDevice {
		return fmt.Errorf("ddp.intra_host: device: the all-reduce over CUDA IPC buffers is not yet run on a GPU (ddpbench allreduce --device cuda runs it alone); use auto or host")
	}
	return nil
}

func (v *IntraHost) setText(s string) error           { return set(v, s, ParseIntraHost) }
func (v *IntraHost) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
