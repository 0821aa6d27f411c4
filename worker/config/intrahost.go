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
	IntraHostDevice IntraHost = "device" // the engine all-reduces on the device over CUDA IPC buffers (ddp/engine_device.go): correct on a GPU, slower than host on a shared one
)

var intraHosts = choices[IntraHost]{key: "ddp.intra_host", values: []IntraHost{IntraHostAuto, IntraHostHost, IntraHostDevice},
	aliases: map[string]IntraHost{"": IntraHostAuto}}

// ParseIntraHost reads `ddp.intra_host`: auto (or ""), host or device.
func ParseIntraHost(s string) (IntraHost, error) { return intraHosts.parse(s) }

// validateIntraHost checks ddp.intra_host and ddp.hierarchical. device (the engine's all-reduce
// over CUDA IPC buffers, ddp/engine_device.go; measured only on a shared GPU) is the user's explicit
// choice, auto stays on the host path; device needs --device cuda (the trainer refuses it
// otherwise, when the device is known). Across hosts it is hierarchical by itself (the device
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
	return nil
}

func (v *IntraHost) setText(s string) error           { return set(v, s, ParseIntraHost) }
func (v *IntraHost) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
