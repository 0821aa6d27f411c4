//go:build cuda

package model

import (
	"fmt"
	"runtime"

	"github.com/goddp/goddp/model/cudadrv"
	"gorgonia.org/cu"
)

// CUDADeviceCount is the number of GPUs the driver shows this process (after
// CUDA_VISIBLE_DEVICES).
func CUDADeviceCount() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cudadrv.Init(); err != nil {
		return 0, fmt.Errorf("model: cuda: %w", err)
	}
	return cu.NumDevices()
}
