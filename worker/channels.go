package worker

import (
	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/worker/config"
)

// The extra process groups (ddp.channels) are opened by allreduce.OpenChannels.

// asComms is gs as the engine's Comm interface.
func asComms(gs []*allreduce.Group) []ddp.Comm {
	out := make([]ddp.Comm, len(gs))
	for i, g := range gs {
		out[i] = g
	}
	return out
}

// wireOf is ddp.wire, resolved (Config.WireFormat), as the all-reduce's wire format.
func wireOf(cfg *Config) allreduce.Wire {
	if cfg.WireFormat() == config.WireF16 {
		return allreduce.WireF16
	}
	return allreduce.WireF32
}
