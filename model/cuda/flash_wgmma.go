//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"sync"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// flashWGKernels is the Hopper attention's modules (flash_wgmma_kernels.go), f16 ([0]) and its bf16
// instantiation ([1]), each with its own kernels, loaded once per device at the first
// launch of its dtype on wgmma. Run on an H100 in session 25 (docs/perf-gpu.md); the default on
// compute capability 9.0 since session 26 (hopperDefault; GODDP_FLASH_WGMMA=0 off).
type flashWGKernels [2]struct {
	once sync.Once
	m    cudadrv.Module
	fns  map[string]cudadrv.Function
	err  error
}

// flashWGPrefix starts the names of the Hopper modules' kernels (fn looks them up there).
const flashWGPrefix = "k_flash_wg_"

// flashWGTiles is the dynamic shared memory of n 64×64 16-bit tiles placed from its first
// 1024-byte boundary (wg_tiles in the kernels): up to 1024 bytes before them. The forward holds 5
// (Q, two stages of K and of V; k_flash_wg_fwd128 6), dq 4 (two stages of dSᵀ and of K).
func flashWGTiles(n int) int { return 1024 + n*64*64*2 }

// flashWGDKDVShared is the dynamic shared memory of the wgmma dk/dv kernel with nwg warpgroups
// (k_flash_wg_dkdv 1, k_flash_wg_dkdv128 2): nwg K and V tiles, two stages of the Q and dO tiles,
// then two of the lse and delta rows and each warp's 16 rows of LDS halves of dSᵀ.
func flashWGDKDVShared(nwg int) int { return flashWGTiles(2*nwg+4) + 4*64*4 + nwg*4*16*72*2 }

// flashWGFns returns the Hopper module of dtype dt (F16, or BF16: the source with
// flashWGBF16Swaps), compiling and loading it on first use: NVRTC for compute_90a (wgmma exists
// only in the arch-specific target), the attention module's options, the disk cache as every
// module; compute capability 9.0 only. Registered are the kernels the source adds to
// flashKernelSource (the ones it repeats stay the other modules').
func (d *Device) flashWGFns(dt tensor.DType) (map[string]cudadrv.Function, error) {
	i := 0
	if dt == tensor.BF16 {
		i = 1
	}
	w := &d.flashWG[i]
	w.once.Do(func() {
		if !d.flash || d.major != 9 || d.minor != 0 {
			w.err = fmt.Errorf("cuda: GODDP_FLASH_WGMMA needs the fused attention (GODDP_FLASH unset) on compute capability 9.0; %s is sm_%d%d", d.name, d.major, d.minor)
			return
		}
		src, err := instantiate(flashWGMMAKernelSource, dt, flashWGBF16Swaps)
		if err != nil {
			w.err = err
			return
		}
		ptx, err := d.compileLaunched(src, append([]string{"--gpu-architecture=compute_90a", "-default-device", "--std=c++17"}, d.flashOpts...))
		if err != nil {
			w.err = fmt.Errorf("cuda: GODDP_FLASH_WGMMA (%s): %w", dt, err)
			return
		}
		d.enter()
		defer d.leave()
		if w.m, err = cudadrv.LoadPTX(ptx); err != nil {
			w.err = fmt.Errorf("cuda: loading the Hopper attention kernels' PTX (%s): %w", dt, err)
			return
		}
		w.fns = map[string]cudadrv.Function{}
		for _, k := range kernelNameRE.FindAllStringSubmatch(src, -1) {
			if !strings.HasPrefix(k[1], flashWGPrefix) {
				continue
			}
			f, err := w.m.Function(k[1])
			if err != nil {
				w.m.Unload()
				w.err, w.fns = fmt.Errorf("cuda: GODDP_FLASH_WGMMA (%s): %w", dt, err), nil
				return
			}
			w.fns[k[1]] = f
		}
	})
	return w.fns, w.err
}

// closeFlashWG unloads the Hopper modules that were loaded. The caller holds the thread (enter).
func (d *Device) closeFlashWG() {
	for i := range d.flashWG {
		w := &d.flashWG[i]
		w.once.Do(func() {}) // a later flashWGFns finds nothing loaded
		if w.fns != nil {
			w.m.Unload()
			w.fns = nil
		}
	}
}
