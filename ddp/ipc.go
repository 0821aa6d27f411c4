package ddp

import (
	"context"
	"fmt"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// The device all-reduce inside a host (issue 34, stage 1): ddp wires allreduce's schedule, which
// knows nothing of devices, to the device's all-reduce over IPC buffers (tensor.IPCDevice), which
// knows nothing of rings. The handles travel over the process group: the authenticated control
// plane, never a socket of their own. `ddpbench allreduce --device cuda` runs it alone; the engine
// calls it for `ddp.intra_host: device` (engine_device.go, on a side stream; docs/perf-gpu-ddp.md has its numbers).

// DevicePlan is rank's schedule of a device all-reduce of count elements among size ranks: rank r
// reduces the ring's owned segment (allreduce.Segment), adding the ranks' values in the order the
// ring adds them (allreduce.ReduceOrder), so the device and the host ring agree on every chunk.
func DevicePlan(count, size, rank int) tensor.IPCPlan {
	p := tensor.IPCPlan{Rank: rank, Size: size, Segments: make([][2]int, size), Order: allreduce.ReduceOrder(size, rank)}
	for r := range size {
		lo, hi := allreduce.Segment(count, size, r)
		p.Segments[r] = [2]int{lo, hi}
	}
	return p
}

// NewDeviceReducer prepares the device all-reduce of buf (a tensor of dev: f32, f16 or bf16, the
// same length and dtype on every rank) among comm's ranks: every rank makes its reducer, the
// handles are all-gathered over comm, and each rank maps its peers'. A rank that cannot make its
// reducer still takes part in the exchange, so every rank fails naming it. It is a collective of
// comm. The caller closes the reducer on every rank after a barrier that follows the last
// all-reduce (tensor.IPCReducer.Close).
func NewDeviceReducer(ctx context.Context, dev tensor.Device, buf *tensor.Tensor, comm Comm) (tensor.IPCReducer, error) {
	var red tensor.IPCReducer
	var mine error
	if ipc, ok := dev.(tensor.IPCDevice); !ok {
		mine = fmt.Errorf("device %s has no all-reduce over IPC buffers (a CUDA build has)", dev.Name())
	} else {
		red, mine = ipc.NewIPCReducer(buf, DevicePlan(buf.Len(), comm.Size(), comm.Rank()))
	}
	var handle []byte
	if mine == nil {
		handle = red.Handle()
	}
	all, mine := exchangeHandles(ctx, comm, handle, mine, "make its reducer")
	if mine == nil {
		mine = red.Connect(all)
	}
	if mine != nil {
		if red != nil {
			red.Close()
		}
		return nil, fmt.Errorf("ddp: device all-reduce, rank %d: %w", comm.Rank(), mine)
	}
	return red, nil
}

// rankCouldNot is exchangeHandles' failure where another rank could not do what it was to.
type rankCouldNot struct {
	rank int
	what string
}

func (e rankCouldNot) Error() string { return fmt.Sprintf("rank %d could not %s", e.rank, e.what) }

// exchangeHandles all-gathers every rank's handle over comm, by rank: this rank offers handle
// unless mine (its own failure) is set, and then still takes part, so that every rank fails,
// naming the first rank that could not do what (for example "make its reducer"). It returns mine
// unchanged when set.
func exchangeHandles(ctx context.Context, comm Comm, handle []byte, mine error, what string) ([][]byte, error) {
	offer := []byte{0}
	if mine == nil {
		offer = append([]byte{1}, handle...)
	}
	all, err := comm.AllGather(ctx, offer)
	if mine != nil {
		return nil, mine
	}
	if err != nil {
		return nil, fmt.Errorf("exchanging the handles: %w", err)
	}
	for r, b := range all {
		if len(b) == 0 || b[0] != 1 {
			return nil, rankCouldNot{r, what}
		}
		all[r] = b[1:]
	}
	return all, nil
}
