//go:build cuda

package worker

import (
	"fmt"
	"log/slog"

	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
)

// With the cuda build tag, --device cuda opens GPU LOCAL_RANK modulo the visible GPUs (so two
// workers on a host with one GPU share it, each with its own context).
func init() {
	visibleGPUs = cuda.DeviceCount
	autoDevice = func() string {
		if n, err := cuda.DeviceCount(); err == nil && n > 0 {
			return "cuda"
		}
		return "cpu"
	}
	deviceOpeners["cuda"] = func(localRank int) (tensor.Device, error) {
		n, err := cuda.DeviceCount()
		if err != nil {
			return nil, fmt.Errorf("worker: counting GPUs: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("worker: --device cuda: no GPU visible (CUDA_VISIBLE_DEVICES?)")
		}
		ord := localRank % n
		if localRank >= n {
			slog.Info("more workers than GPUs: sharing", "local_rank", localRank, "gpu", ord, "gpus", n)
		}
		return cuda.New(ord)
	}
}
