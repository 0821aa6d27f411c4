//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"sync"

	"github.com/goddp/goddp/model/cuda/cudadrv"
)

// flashWGKernels is the Hopper attention forward's module (flash_wgmma_kernels.go) and its own
// kernels, loaded once per device at the first GODDP_FLASH_WGMMA=1 forward. Not yet run on a GPU.
type flashWGKernels struct {
	once sync.Once
	m    cudadrv.Module
	fns  map[string]cudadrv.Function
	err  error
}

// flashWGPrefix starts the names of the Hopper module's kernels (fn looks them up there).
const flashWGPrefix = "k_flash_wg_"

// flashWGDKDVShared is k_flash_wg_dkdv's dynamic shared memory: up to 1024 bytes to its first
// 1024-byte boundary, the K and V tiles, two stages of the Q and dO tiles (8 KiB each), two of the
// lse and delta rows, and four warps' 16 rows of LDS halves of dSᵀ.
const flashWGDKDVShared = 1024 + 6*64*64*2 + 4*64*4 + 4*16*72*2

// flashWGFns returns the Hopper module's kernels, compiling and loading it on first use: NVRTC
// for compute_90a (wgmma exists only in the arch-specific target), the attention module's options,
// the disk cache as every module; compute capability 9.0 only. Registered are the kernels the
// source adds to flashKernelSource (the ones it repeats stay the f16 module's).
func (d *Device) flashWGFns() (map[string]cudadrv.Function, error) {
	w := &d.flashWG
	w.once.Do(func() {
		if !d.flash || d.major != 9 || d.minor != 0 {
			w.err = fmt.Errorf("cuda: GODDP_FLASH_WGMMA=1 needs the fused attention (GODDP_FLASH unset) on compute capability 9.0; %s is sm_%d%d", d.name, d.major, d.minor)
			return
		}
		ptx, err := compileCached(flashWGMMAKernelSource, append([]string{"--gpu-architecture=compute_90a", "-default-device", "--std=c++17"}, d.flashOpts...))
		if err != nil {
			w.err = fmt.Errorf("cuda: GODDP_FLASH_WGMMA=1: %w", err)
			return
		}
		d.enter()
		defer d.leave()
		if w.m, err = cudadrv.LoadPTX(ptx); err != nil {
			w.err = fmt.Errorf("cuda: loading the Hopper attention kernels' PTX: %w", err)
			return
		}
		w.fns = map[string]cudadrv.Function{}
		for _, k := range kernelNameRE.FindAllStringSubmatch(flashWGMMAKernelSource, -1) {
			if !strings.HasPrefix(k[1], flashWGPrefix) {
				continue
			}
			f, err := w.m.Function(k[1])
			if err != nil {
				w.m.Unload()
				w.err, w.fns = fmt.Errorf("cuda: GODDP_FLASH_WGMMA=1: %w", err), nil
				return
			}
			w.fns[k[1]] = f
		}
	})
	return w.fns, w.err
}

// closeFlashWG unloads the Hopper module if it was loaded. The caller holds the thread (enter).
func (d *Device) closeFlashWG() {
	d.flashWG.once.Do(func() {}) // a later flashWGFns finds nothing loaded
	if d.flashWG.fns != nil {
		d.flashWG.m.Unload()
		d.flashWG.fns = nil
	}
}
