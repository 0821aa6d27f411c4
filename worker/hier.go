package worker

import (
	"context"
	"errors"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
)

// hierarchies opens ddp.hierarchical's rings (allreduce.OpenHierarchy: reduce-scatter inside the
// host, the ring between hosts on each local rank's share, all-gather inside the host) for the
// main group and each channel, LOCAL_WORLD_SIZE ranks a host, and returns them as the engine's
// Comms. They are closed with the trainer, before the groups they compose. Under
// ddp.hierarchical the intra-host rings run over the host planes (shared memory): the gradients
// go the host path, f16 staging off. Under ddp.intra_host: device across hosts the engine uses
// the host's ring only as its control plane and reduces inside the host on the device.
func (t *Trainer) hierarchies(ctx context.Context, base allreduce.Config, groups []*allreduce.Group) ([]ddp.Comm, error) {
	var hs []*allreduce.Hierarchy
	closeAll := func() error {
		var errs []error
		for _, h := range hs {
			errs = append(errs, h.Close())
		}
		return errors.Join(errs...)
	}
	out := make([]ddp.Comm, len(groups))
	for i, g := range groups {
		h, err := allreduce.OpenHierarchy(ctx, g, base, t.env.LocalWorldSize)
		if err != nil {
			closeAll()
			return nil, err
		}
		hs = append(hs, h)
		out[i] = h
	}
	t.onClose(closeAll)
	inside := "host (shared memory)"
	if t.deviceAcrossHosts() {
		inside = "device (CUDA IPC)"
	}
	t.log.Info("ddp: hierarchical all-reduce: reduce-scatter inside the host, the ring between hosts on each local rank's share, all-gather inside the host",
		"local_ranks", hs[0].Local(), "hosts", hs[0].Hosts(), "channels", len(hs), "intra_host", inside)
	return out, nil
}
