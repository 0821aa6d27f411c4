//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// Fused causal attention on the GPU (kernels in flash_kernels.go): head size 64, f16 or bf16, compute
// capability 8.0 or later (mma.sync). GODDP_FLASH=0 in the environment turns the fused path off
// (FlashAttentionFast is then false, so layers choosing automatically materialise the scores).

// loadFlash compiles and loads the fused attention module when the device can run it.
func (d *Device) loadFlash() error {
	if wg, _ := parseFlashWGMMA(flashWGMMAValue()); wg != (flashWGParts{}) && (d.major != 9 || d.minor != 0 || flashOff()) {
		return fmt.Errorf("cuda: GODDP_FLASH_WGMMA=%s: the attention kernels on wgmma need the fused attention (GODDP_FLASH unset) on compute capability 9.0; %s is sm_%d%d",
			flashWGMMAValue(), d.name, d.major, d.minor)
	}
	if d.major < 8 || flashOff() {
		return nil
	}
	arch := fmt.Sprintf("compute_%d%d", d.major, d.minor)
	var err error
	if d.flashOpts, d.flashTileMajor, err = flashOptions(); err != nil {
		return err
	}
	ptx, err := d.compileLaunched(flashKernelSource, append([]string{"--gpu-architecture=" + arch, "-default-device", "--std=c++17"}, d.flashOpts...))
	if err != nil {
		return err
	}
	if d.flashM, err = cudadrv.LoadPTX(ptx); err != nil {
		return fmt.Errorf("cuda: loading the attention kernels' PTX: %w", err)
	}
	carve, err := flashCarveout()
	if err != nil {
		return err
	}
	for _, m := range kernelNameRE.FindAllStringSubmatch(flashKernelSource, -1) {
		f, err := d.flashM.Function(m[1])
		if err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		if carve != flashCarveoutUnset {
			if err := f.SetCarveout(carve); err != nil {
				return fmt.Errorf("cuda: GODDP_FLASH_CARVEOUT=%d on %s: %w", carve, m[1], err)
			}
		}
		d.fns[m[1]] = f
	}
	d.flash = true
	return nil
}

// KernelResources is what the loaded kernel name holds — registers and local (spill) bytes per
// thread, static shared memory per block — and how many of its blocks of block threads (and
// dynShared bytes of dynamic shared memory) fit one SM: the launch statistics of a profiler
// without its counters (TestCUDA_flashKernelResources logs the attention kernels').
func (d *Device) KernelResources(name string, block, dynShared int) (cudadrv.Resources, error) {
	f, ok := d.fns[name]
	if !ok {
		return cudadrv.Resources{}, fmt.Errorf("cuda: no kernel %q loaded", name)
	}
	d.enter()
	defer d.leave()
	return f.Resources(block, dynShared)
}

// FlashAttentionFast: head size 64 in f16, or in bf16 once the bf16 instantiation of the fused
// kernels has loaded (bf16.go; asking compiles it).
func (d *Device) FlashAttentionFast(hs int, dt tensor.DType) bool {
	if !d.flash || hs != 64 {
		return false
	}
	switch dt {
	case tensor.F16:
		return true
	case tensor.BF16:
		_, err := d.bf16Fns()
		return err == nil && d.bf16.flash
	}
	return false
}

// flashCheck panics unless the fused kernels apply to these tensors: all f16 or all bf16.
func (d *Device) flashCheck(op string, hs int, ts ...*tensor.Tensor) {
	dt := ts[0].DType()
	if !d.FlashAttentionFast(hs, dt) {
		panic(fmt.Sprintf("cuda: %s needs head size 64 in f16 or bf16 on compute capability ≥ 8.0 (have head size %d, %s, sm_%d%d, fused kernels loaded: %v)",
			op, hs, dt, d.major, d.minor, d.flash))
	}
	for _, t := range ts {
		if t.DType() != dt || dptr(t)%16 != 0 {
			panic(fmt.Sprintf("cuda: %s wants 16-byte aligned tensors all of %s, got %s", op, dt, t))
		}
	}
}

func (d *Device) FlashAttention(y, lse, qkv *tensor.Tensor, heads int, scale float32) {
	B, T, _, hs := tensor.FlashDims("FlashAttention", y, lse, qkv, heads)
	d.flashCheck("FlashAttention", hs, y, qkv)
	if B*T == 0 {
		return
	}
	name, rows := "k_flash_fwd", 64
	if d.flashRows == 128 {
		name, rows = "k_flash_fwd128", 128
	}
	shared := 0
	if wg := d.flashWGMMA(); wg.fwd { // the Hopper forward (flash_wgmma.go): its tiles in dynamic shared memory
		switch {
		case rows == 128:
			name, shared = "k_flash_wg_fwd128", flashWGTiles(6)
		case wg.fwdp:
			name, shared = "k_flash_wg_fwdp", flashWGTiles(5)
		default:
			name, shared = "k_flash_wg_fwd", flashWGTiles(5)
		}
	}
	name = kn(name, y, qkv)
	if shared > 0 {
		d.allowDynShared(name, shared)
	}
	d.launch(name, d.flashGrid((T+rows-1)/rows, B*heads), [3]int{2 * rows, 1, 1}, shared,
		ptra(y), ptra(lse), ptra(qkv), i32a(T), i32a(heads), f32a(scale*math.Log2E))
}

// flashGrid is the attention kernels' grid of tiles × bh blocks: (bh, tiles), tile-major (the
// default), or (tiles, bh) under GODDP_FLASH_TILE_MAJOR=0 (the kernels compiled to match:
// flash_tile in the source).
func (d *Device) flashGrid(tiles, bh int) [3]int {
	if d.flashTileMajor {
		return [3]int{bh, tiles, 1}
	}
	return [3]int{tiles, bh, 1}
}

var _ tensor.FlashForwardRower = (*Device)(nil)

// SetFlashForwardRows picks the fused forward's block of query rows (tensor.FlashForwardRower):
// 64 (k_flash_fwd, 4 warps) or 128 (k_flash_fwd128, 8 warps; the same bits, its test passed on a
// GPU; measured no faster on an H100, session 11). The backward
// keeps its blocks of 64.
func (d *Device) SetFlashForwardRows(rows int) error {
	if rows != 64 && rows != 128 {
		return fmt.Errorf("%d rows: the fused attention's forward runs blocks of 64 or 128", rows)
	}
	d.flashRows = rows
	return nil
}

func (d *Device) FlashAttentionBackward(dqkv, dy, qkv, y, lse *tensor.Tensor, heads int, scale float32) {
	B, T, _, hs := tensor.FlashDims("FlashAttentionBackward", y, lse, qkv, heads)
	if !tensor.SameShape(dqkv, qkv) || !tensor.SameShape(dy, y) {
		panic(fmt.Sprintf("cuda: FlashAttentionBackward: dqkv %s / qkv %s, dy %s / y %s", dqkv, qkv, dy, y))
	}
	d.flashCheck("FlashAttentionBackward", hs, dqkv, dy, qkv, y)
	if B*T == 0 {
		return
	}
	delta := d.Alloc(tensor.F32, "attn.flash.delta", B, heads, T)
	nt := (T + 63) / 64
	grid := d.flashGrid(nt, B*heads)
	if flashDS() { // dk/dv stores dS, dq multiplies it by K: nothing recomputed twice (env.go)
		ds := d.Alloc(qkv.DType(), "attn.flash.ds", B*heads*nt*(nt+1)/2, 64*64)
		d.flashDelta(delta, dy, y, B*T*heads, T, heads)
		wg := d.flashWGMMA()
		if wg.dkdv { // on wgmma (flash_wgmma.go), the same ds blocks
			name, nwg := "k_flash_wg_dkdv", 1
			if wg.dkdv128 { // 128 keys a block
				name, nwg = "k_flash_wg_dkdv128", 2
			}
			name, shared := kn(name, dqkv, qkv), flashWGDKDVShared(nwg)
			d.allowDynShared(name, shared)
			d.launch(name, d.flashGrid((nt+nwg-1)/nwg, B*heads), [3]int{128 * nwg, 1, 1}, shared,
				ptra(dqkv), ptra(qkv), ptra(dy), ptra(lse), ptra(delta), ptra(ds), i32a(T), i32a(heads), f32a(scale))
		} else {
			d.launch(kn("k_flash_bwd_dkdv_ds", dqkv, qkv), grid, [3]int{128, 1, 1}, 0,
				ptra(dqkv), ptra(qkv), ptra(dy), ptra(lse), ptra(delta), ptra(ds), i32a(T), i32a(heads), f32a(scale))
		}
		if wg.dq { // on wgmma (flash_wgmma.go)
			name := kn("k_flash_wg_dq", dqkv, qkv)
			d.allowDynShared(name, flashWGTiles(4))
			d.launch(name, grid, [3]int{128, 1, 1}, flashWGTiles(4), ptra(dqkv), ptra(qkv), ptra(ds), i32a(T), i32a(heads), f32a(scale))
		} else if flashDQPair() { // two query tiles a block (k_flash_bwd_dq_ds2; env.go)
			name := kn("k_flash_bwd_dq_ds2", dqkv, qkv)
			d.allowDynShared(name, flashDQPairShared)
			d.launch(name, d.flashGrid((nt+1)/2, B*heads), [3]int{256, 1, 1}, flashDQPairShared,
				ptra(dqkv), ptra(qkv), ptra(ds), i32a(T), i32a(heads), f32a(scale))
		} else {
			d.launch(kn("k_flash_bwd_dq_ds", dqkv, qkv), grid, [3]int{128, 1, 1}, 0,
				ptra(dqkv), ptra(qkv), ptra(ds), i32a(T), i32a(heads), f32a(scale))
		}
		d.Free(ds)
		d.Free(delta)
		return
	}
	if flashDeltaFold() { // dq makes delta, then dk/dv reads it (env.go)
		d.launch(kn("k_flash_bwd_dq_delta", dqkv, qkv), grid, [3]int{128, 1, 1}, 0,
			ptra(dqkv), ptra(qkv), ptra(dy), ptra(y), ptra(lse), ptra(delta), i32a(T), i32a(heads), f32a(scale))
		d.launch(kn("k_flash_bwd_dkdv", dqkv, qkv), grid, [3]int{128, 1, 1}, 0,
			ptra(dqkv), ptra(qkv), ptra(dy), ptra(lse), ptra(delta), i32a(T), i32a(heads), f32a(scale))
		d.Free(delta)
		return
	}
	d.flashDelta(delta, dy, y, B*T*heads, T, heads)
	args := []uint64{ptra(dqkv), ptra(qkv), ptra(dy), ptra(lse), ptra(delta), i32a(T), i32a(heads), f32a(scale)}
	d.launch(kn("k_flash_bwd_dkdv", dqkv, qkv), grid, [3]int{128, 1, 1}, 0, args...)
	d.launch(kn("k_flash_bwd_dq", dqkv, qkv), grid, [3]int{128, 1, 1}, 0, args...)
	d.Free(delta)
}

// flashDQPairShared is k_flash_bwd_dq_ds2's dynamic shared memory: two stages of a K tile and two
// dS blocks, 64 rows of LDS = 72 halves each.
const flashDQPairShared = 2 * 3 * 64 * 72 * 2

// flashDelta launches the backward's row sums delta = Σ dy·y (n = B·T·H rows): eight lanes a row
// (k_flash_bwd_delta8, the default), one thread a row under GODDP_FLASH_DELTA8=0 (the same bits).
func (d *Device) flashDelta(delta, dy, y *tensor.Tensor, n, T, heads int) {
	name, threads := "k_flash_bwd_delta", n
	if flashDelta8() {
		name, threads = "k_flash_bwd_delta8", 8*n
	}
	d.launch1(kn(name, dy, y), threads, ptra(delta), ptra(dy), ptra(y), i32a(T), i32a(heads), u64a(uint64(n)))
}
