//go:build cuda

package cuda

import (
	"fmt"
	"runtime"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"gorgonia.org/cu"
)

// DeviceCount is the number of GPUs the driver shows this process (after
// CUDA_VISIBLE_DEVICES).
func DeviceCount() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cudadrv.Init(); err != nil {
		return 0, fmt.Errorf("cuda: %w", err)
	}
	return cu.NumDevices()
}
