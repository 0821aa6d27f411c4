package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
	"github.com/goddp/goddp/model/tensor"
	"github.com/goddp/goddp/worker"
)

// `ddpbench allreduce --device cuda`: beside each host-ring row, the same buffer all-reduced on the
// GPU over CUDA IPC buffers (issue 34; model/cuda/ipc.go, wired by ddp.NewDeviceReducer: the
// handles over the group), the values in the wire's dtype on the device (f32, f16 or bf16), Avg. Each
// rank opens GPU rank mod the GPUs (the bench's ranks are all local). A row is the median of the
// slowest rank's times from a barrier to the end of the kernel (the stream synchronised): the
// transport column says cuda-ipc. Not yet run on a GPU.

// checkDevice validates --device (and the wires it can take) before any rank starts.
func (f *benchFlags) checkDevice() error {
	switch f.device {
	case "cpu":
		return nil
	case "cuda": // every wire: the device uploads f32, f16 and bf16
		return nil
	}
	return fmt.Errorf("ddpbench: --device %q: want cpu or cuda", f.device)
}

// openDevice opens the rank's GPU for --device cuda (nil for cpu).
func (f *benchFlags) openDevice(rank int) (tensor.Device, error) {
	if f.device != "cuda" {
		return nil, nil
	}
	return worker.OpenDevice("cuda", rank)
}

// benchDevice measures the device all-reduce of vals (as wire's dtype) and prints its row (rank 0).
func benchDevice(ctx context.Context, g *allreduce.Group, dev tensor.Device, vals []float32, wire allreduce.Wire, f benchFlags) error {
	dt := tensor.F32
	switch wire {
	case allreduce.WireF16:
		dt = tensor.F16
	case allreduce.WireBF16:
		dt = tensor.BF16
	}
	buf := dev.Alloc(dt, "ddpbench.ipc", len(vals))
	defer dev.Free(buf)
	dev.Upload(buf, vals)
	red, err := ddp.NewDeviceReducer(ctx, dev, buf, g)
	if err != nil {
		return err
	}
	times := make([]float64, 0, f.iters)
	for it := range f.warmup + f.iters {
		if err := g.Barrier(ctx); err != nil {
			red.Close()
			return err
		}
		t0 := time.Now()
		red.AllReduce(true)
		dev.Sync()
		if it >= f.warmup {
			times = append(times, time.Since(t0).Seconds())
		}
	}
	// Every rank's last all-reduce is over before any rank unmaps its peers.
	err = g.Barrier(ctx)
	if cerr := red.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	worst, err := maxAcrossRanks(ctx, g, times)
	if err != nil || g.Rank() != 0 {
		return err
	}
	row := rowOf(worst, g.Size(), int64(4*len(vals)), wire, f.iters)
	row.Transport, row.Channels = "cuda-ipc", 1
	b, _ := json.Marshal(row)
	fmt.Println(string(b))
	return nil
}
