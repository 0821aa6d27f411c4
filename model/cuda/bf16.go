//go:build cuda

package cuda

import (
	"fmt"
	"strings"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// bfloat16 on the device (issue 32, stage 2). The kernel sources (kernels.go, flash_kernels.go,
// staging_kernels.go) are written once, over a 16-bit type half_t and its two conversions h2f and
// f2h, each defined on a line of its own. The f16 module is that source as it is: its bytes, and so
// its PTX and its cache file, are the ones the device compiled before bf16 existed. The bf16 module
// is the same source with those definitions swapped (bf16Swaps) when NVRTC compiles it, so f16 and
// bf16 share every other line: a kernel's dtype code 1 ("16-bit") means f16 in the one module and
// bf16 in the other (BF16's code, 3, is also non-zero, and kernels only test dt == 0 and, for
// k_fill, dt == 2). The fused attention source also swaps its mma.sync instruction for the bf16
// form (the same m16n8k16 fragment shapes).
//
// Conversions, as the f16 ones, are PTX without a header (NVRTC then needs no include path):
// widening is exact (the bf16 bits are the top half of the f32), narrowing is cvt.rn.bf16.f32,
// round-to-nearest-even (compute capability 8.0 and later, which cuBLAS's bf16 GEMMs need too). It
// gives half.BF16FromFloat32's bits for every non-NaN input; a NaN becomes the canonical 0x7fff.
//
// The bf16 module is compiled (or read from the disk cache) the first time something asks for it:
// CheckCompute(BF16), or a launch on a bf16 tensor. An f16 or f32 run never compiles it.

const (
	f16H2F  = `__device__ __forceinline__ float h2f(half_t h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }`
	f16F2H  = `__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }`
	bf16H2F = `__device__ __forceinline__ float h2f(half_t h) { return __uint_as_float((unsigned int)h << 16); }`
	bf16F2H = `__device__ __forceinline__ half_t f2h(float f) { half_t h; asm("{cvt.rn.bf16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }`
	f16MMA  = `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`
	bf16MMA = `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`
	// the attention's pack2 under FLASH_PACK_X2 (flash_kernels.go): two floats rounded into one
	// 32-bit pair by one instruction (lo in the low half: cvt's second source)
	f16Pack2X  = `asm("{cvt.rn.f16x2.f32 %0, %2, %1;}" : "=r"(r) : "f"(lo), "f"(hi));`
	bf16Pack2X = `asm("{cvt.rn.bf16x2.f32 %0, %2, %1;}" : "=r"(r) : "f"(lo), "f"(hi));`
	// the Hopper attention's wgmma (flash_wgmma_kernels.go): its operand types
	f16WGMMA  = `#define WG_MMA "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "`
	bf16WGMMA = `#define WG_MMA "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "`
)

// bf16Swaps turns an elementwise source's f16 instantiation into its bf16 one; flashBF16Swaps
// does the same for the fused attention source.
var (
	bf16Swaps      = [][2]string{{f16H2F, bf16H2F}, {f16F2H, bf16F2H}}
	flashBF16Swaps = [][2]string{{f16H2F, bf16H2F}, {f16F2H, bf16F2H}, {f16MMA, bf16MMA}, {f16Pack2X, bf16Pack2X}}
	// flashWGBF16Swaps: flashBF16Swaps and the wgmma's operand types, for the Hopper module
	flashWGBF16Swaps = append(flashBF16Swaps[:len(flashBF16Swaps):len(flashBF16Swaps)], [2]string{f16WGMMA, bf16WGMMA})
)

// instantiate returns src for the 16-bit dtype dt: src itself for F16, src with each swap applied
// for BF16. Each swapped text must occur exactly once, so a source whose definitions moved or
// changed fails here instead of compiling a module that is half f16.
func instantiate(src string, dt tensor.DType, swaps [][2]string) (string, error) {
	switch dt {
	case tensor.F16:
		return src, nil
	case tensor.BF16:
		for _, s := range swaps {
			if n := strings.Count(src, s[0]); n != 1 {
				return "", fmt.Errorf("cuda: bf16 kernels: %q occurs %d times in the f16 source, want once", s[0], n)
			}
			src = strings.Replace(src, s[0], s[1], 1)
		}
		return src, nil
	}
	return "", fmt.Errorf("cuda: no 16-bit kernel instantiation for %s", dt)
}

// bf16Suffix marks a kernel name to be looked up in the bf16 module (kn).
const bf16Suffix = "@bf16"

// kn names kernel name for the tensors it is launched on: name itself unless one of them is BF16,
// then the bf16 module's kernel. A launch mixing F16 and BF16 tensors has no module (the callers
// route such mixes through f32) and panics. Nil tensors are skipped.
func kn(name string, ts ...*tensor.Tensor) string {
	f16, bf16 := false, false
	for _, t := range ts {
		if t == nil {
			continue
		}
		switch t.DType() {
		case tensor.F16:
			f16 = true
		case tensor.BF16:
			bf16 = true
		}
	}
	if !bf16 {
		return name
	}
	if f16 {
		parts := make([]string, 0, len(ts))
		for _, t := range ts {
			if t != nil {
				parts = append(parts, t.String())
			}
		}
		panic(fmt.Sprintf("cuda: %s on f16 and bf16 tensors at once: %s", name, strings.Join(parts, ", ")))
	}
	return name + bf16Suffix
}

// bf16Kernels is the bf16 instantiation's modules and functions, made once per device.
type bf16Kernels struct {
	mod, flashM cudadrv.Module
	flash       bool
	fns         map[string]cudadrv.Function
	err         error
}

// loadBF16 compiles (or reads from the cache) and loads the bf16 instantiations of the kernel
// module and, where the f16 fused attention is loaded, of the attention module. Called once, by
// bf16Fns.
func (d *Device) loadBF16() {
	b := &d.bf16
	b.fns = map[string]cudadrv.Function{}
	if d.major < 8 {
		b.err = fmt.Errorf("cuda: precision bf16 needs compute capability 8.0 or later (bf16 tensor-core GEMMs and cvt.rn.bf16.f32); %s is sm_%d%d: use fp16 or fp32", d.name, d.major, d.minor)
		return
	}
	opts := []string{fmt.Sprintf("--gpu-architecture=compute_%d%d", d.major, d.minor), "-default-device", "--std=c++17"}
	load := func(what, f16src string, swaps [][2]string, extra ...string) (cudadrv.Module, error) {
		src, err := instantiate(f16src, tensor.BF16, swaps)
		if err != nil {
			return cudadrv.Module{}, err
		}
		ptx, err := d.compileLaunched(src, append(append([]string{}, opts...), extra...))
		if err != nil {
			return cudadrv.Module{}, fmt.Errorf("cuda: bf16 %s: %w", what, err)
		}
		d.enter()
		defer d.leave()
		m, err := cudadrv.LoadPTX(ptx)
		if err != nil {
			return cudadrv.Module{}, fmt.Errorf("cuda: loading the bf16 %s' PTX: %w", what, err)
		}
		for _, k := range kernelNameRE.FindAllStringSubmatch(src, -1) {
			f, err := m.Function(k[1])
			if err != nil {
				m.Unload()
				return cudadrv.Module{}, fmt.Errorf("cuda: bf16 %s: %w", what, err)
			}
			b.fns[k[1]] = f
		}
		return m, nil
	}
	if b.mod, b.err = load("kernels", kernelSource, bf16Swaps, kernelOptions()...); b.err != nil {
		return
	}
	if d.flash {
		opts = append(opts, d.flashOpts...) // the f16 module's grid order and register budgets
		if b.flashM, b.err = load("attention kernels", flashKernelSource, flashBF16Swaps); b.err != nil {
			d.enter()
			b.mod.Unload()
			d.leave()
			return
		}
		b.flash = true
	}
}

// bf16Fns returns the bf16 module's functions, loading the module on first use, or its error.
func (d *Device) bf16Fns() (map[string]cudadrv.Function, error) {
	d.bf16Once.Do(d.loadBF16)
	return d.bf16.fns, d.bf16.err
}

// fn looks kernel name up: in the bf16 module when name carries bf16Suffix (kn), else in the f16
// one (which also holds the f32-only kernels); a name neither holds that starts with flashWGPrefix
// in the Hopper attention module of its dtype (the launch path's lookups stay one map read).
func (d *Device) fn(name string) (cudadrv.Function, bool) {
	base, isBF := strings.CutSuffix(name, bf16Suffix)
	if !isBF {
		if f, ok := d.fns[name]; ok {
			return f, true
		}
	} else {
		fns, err := d.bf16Fns()
		if err != nil {
			panic(err.Error())
		}
		if f, ok := fns[base]; ok {
			return f, true
		}
	}
	if strings.HasPrefix(base, flashWGPrefix) { // the Hopper attention's modules (flash_wgmma.go), loaded at first use
		dt := tensor.F16
		if isBF {
			dt = tensor.BF16
		}
		fns, err := d.flashWGFns(dt)
		if err != nil {
			panic(err.Error())
		}
		f, ok := fns[base]
		return f, ok
	}
	return cudadrv.Function{}, false
}

// closeBF16 unloads the bf16 modules if they were loaded. The caller holds the thread (enter).
func (d *Device) closeBF16() {
	d.bf16Once.Do(func() {}) // a later bf16Fns finds nothing loaded
	if d.bf16.mod != (cudadrv.Module{}) {
		d.bf16.mod.Unload()
	}
	if d.bf16.flash {
		d.bf16.flashM.Unload()
	}
}

// CheckCompute accepts f32 and f16, and bf16 where the bf16 kernels compile and load (compute
// capability 8.0 and later): the first bf16 request compiles them, so a failure is reported here,
// naming the card, before a model is built.
func (d *Device) CheckCompute(dt tensor.DType) error {
	if dt == tensor.BF16 {
		_, err := d.bf16Fns()
		return err
	}
	return nil
}

// CheckConvCompute refuses bf16 for convolutional networks (model.NewResNet asks): the
// convolution path (conv.go, cuDNN) runs in f32 and f16 only, and would otherwise panic at the
// first convolution.
func (d *Device) CheckConvCompute(dt tensor.DType) error {
	if dt == tensor.BF16 {
		return fmt.Errorf("cuda: convolutional networks run in f32 or f16 on the CUDA device, not bf16 (bf16 convolutions are not implemented): use precision fp16, or bf16 with --device cpu")
	}
	return nil
}
