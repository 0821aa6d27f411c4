package worker

import (
	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
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
