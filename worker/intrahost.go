package worker

import (
	"context"
	"fmt"

	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker/config"
)

// intraHostDevice puts the engine on the device path for `ddp.intra_host: device` (issue 34
// stage 2, ddp/engine_device.go; not yet run on a GPU): refused on a device without the IPC
// all-reduce (the CPU), on every rank alike before any collective. With several hosts the
// engine's groups are the hierarchy's rings (startEngine opens them: deviceAcrossHosts) and the
// device path inside each host is composed with the ring between hosts. auto and host stay on
// the host path.
func (t *Trainer) intraHostDevice(ctx context.Context, eng *ddp.Engine) error {
	v, err := config.ParseIntraHost(string(t.cfg.DDP.IntraHost))
	if err != nil || v != config.IntraHostDevice {
		return err
	}
	if _, ok := t.dev.(tensor.IPCStreamDevice); !ok {
		return fmt.Errorf("ddp.intra_host: device needs --device cuda (this run's device is %s); use auto or host", t.dev.Name())
	}
	hosts := max(1, t.env.WorldSize/max(1, t.env.LocalWorldSize))
	return eng.UseDevice(ctx, hosts)
}

// deviceAcrossHosts reports whether ddp.intra_host is device in a world of several hosts: the
// engine then runs over allreduce.Hierarchy's rings, as ddp.hierarchical does.
func (t *Trainer) deviceAcrossHosts() bool {
	_, ipc := t.dev.(tensor.IPCStreamDevice) // without it intraHostDevice refuses, rings or not
	return ipc && t.wantsDeviceReduce() && t.env.WorldSize > max(1, t.env.LocalWorldSize)
}

// wantsDeviceReduce reports whether ddp.intra_host is device (then the engine skips the pinned
// staging it would otherwise set up, which the device path replaces).
func (t *Trainer) wantsDeviceReduce() bool {
	v, err := config.ParseIntraHost(string(t.cfg.DDP.IntraHost))
	return err == nil && v == config.IntraHostDevice
}
