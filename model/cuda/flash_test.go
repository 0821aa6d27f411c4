//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/goddp/goddp/model/tensor"
)

// The fused attention kernels against the CPU's reference FlashAttention (model/cpu/flash.go),
// whose agreement with the materialised path model/flash_test.go checks: forward output and
// log-sum-exp, and the backward's dq, dk, dv, on sequence lengths that are and are not multiples
// of the 64-row tile.
func TestCUDA_flashAttentionMatchesCPU(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.F16) {
		t.Skipf("no fused attention on %s", g.DeviceName())
	}
	base := g.Stats().Allocated
	for i, sh := range [][3]int{{1, 1, 1}, {2, 64, 3}, {2, 100, 2}, {1, 200, 12}, {1, 1024, 2}} {
		B, T, H := sh[0], sh[1], sh[2]
		C := 64 * H
		c := cuOpCase{fmt.Sprintf("FlashAttention/B%d.T%d.H%d", B, T, H), func(m *cuMaker) []*tensor.Tensor {
			qkv := m.in(tensor.F16, B, T, 3*C)
			y, lse := m.out(tensor.F16, B, T, C), m.out(tensor.F32, B, H, T)
			m.dev.FlashAttention(y, lse, qkv, H, 0.125)
			dy := m.in(tensor.F16, B, T, C)
			dqkv := m.out(tensor.F16, B, T, 3*C)
			m.dev.FlashAttentionBackward(dqkv, dy, qkv, y, lse, H, 0.125)
			return []*tensor.Tensor{y, lse, dqkv}
		}}
		cuRunCase(t, g, c, uint64(500+i))
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after the flash tests, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}

// model.flash_forward_rows: 128 launches k_flash_fwd128, whose blocks own 128 query rows: every
// row still adds the same key tiles in the same order with the same arithmetic, so its output and
// log-sum-exp are k_flash_fwd's very bits, in f16 and in bf16, on lengths that are and are not
// multiples of 128 (and of 64), one row to 1024. Not yet run on a GPU.
func TestCUDA_flashForward128SameBits(t *testing.T) {
	g := gpu(t)
	defer g.SetFlashForwardRows(64) // the shared test device goes back to the default
	if err := g.SetFlashForwardRows(96); err == nil {
		t.Error("96 rows accepted")
	}
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		if !g.FlashAttentionFast(64, dt) {
			t.Logf("no fused attention in %s on %s", dt, g.DeviceName())
			continue
		}
		for i, sh := range [][3]int{{1, 1, 1}, {2, 64, 3}, {2, 100, 2}, {1, 130, 2}, {1, 200, 12}, {2, 1024, 2}} {
			B, T, H := sh[0], sh[1], sh[2]
			C := 64 * H
			rng := rand.New(rand.NewPCG(uint64(i), uint64(dt)))
			v := make([]float32, B*T*3*C)
			for j := range v {
				v[j] = float32(rng.NormFloat64())
			}
			qkv := g.Alloc(dt, "qkv", B, T, 3*C)
			ipcUpload(g, qkv, v)
			var ys [2][]uint16
			var lses [2][]float32
			for k, rows := range []int{64, 128} {
				if err := g.SetFlashForwardRows(rows); err != nil {
					t.Fatal(err)
				}
				y, lse := g.Alloc(dt, "y", B, T, C), g.Alloc(tensor.F32, "lse", B, H, T)
				g.FlashAttention(y, lse, qkv, H, 0.125)
				ys[k] = make([]uint16, y.Len())
				g.dtoh(unsafe.Pointer(&ys[k][0]), y)
				lses[k] = make([]float32, lse.Len())
				g.Download(lses[k], lse)
				g.Free(y)
				g.Free(lse)
			}
			g.Free(qkv)
			for j := range ys[0] {
				if ys[0][j] != ys[1][j] {
					t.Fatalf("%s B%d T%d H%d: y[%d] bits %#04x with 128-row blocks, %#04x with 64", dt, B, T, H, j, ys[1][j], ys[0][j])
				}
			}
			for j := range lses[0] {
				if math.Float32bits(lses[0][j]) != math.Float32bits(lses[1][j]) {
					t.Fatalf("%s B%d T%d H%d: lse[%d] %g with 128-row blocks, %g with 64", dt, B, T, H, j, lses[1][j], lses[0][j])
				}
			}
		}
	}
}

// The attention kernels' launch statistics, read from the driver (Device.KernelResources): logged
// for the profile of issue 35 (registers, spills, blocks per SM), and checked where they are known:
// the static shared memory each kernel declares, and an occupancy no larger than the register file
// allows (65536 registers an SM on every GPU from sm_80 to sm_90).
func TestCUDA_flashKernelResources(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.F16) {
		t.Skipf("no fused attention on %s", g.DeviceName())
	}
	const tile = 2 * 64 * 72 * 2 // one double-buffered tile of 64 rows of 72 halves
	for _, k := range []struct {
		name    string
		threads int
		shared  int
	}{
		{"k_flash_fwd", 128, 2 * tile},
		{"k_flash_fwd128", 256, 2 * tile},
		{"k_flash_bwd_dkdv", 128, 2*tile + 2*2*64*4},
		{"k_flash_bwd_dq", 128, 2 * tile},
	} {
		r, err := g.KernelResources(k.name, k.threads, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-18s %3d threads: %3d registers, %4d local bytes, %6d B shared, %d blocks/SM (%d warps)",
			k.name, k.threads, r.Registers, r.LocalBytes, r.StaticShared, r.BlocksPerSM, r.BlocksPerSM*k.threads/32)
		if r.StaticShared != k.shared {
			t.Errorf("%s: %d bytes of static shared memory, the source declares %d", k.name, r.StaticShared, k.shared)
		}
		if r.Registers <= 0 || r.BlocksPerSM < 1 || r.MaxThreads < k.threads {
			t.Errorf("%s: %+v: not launchable at %d threads", k.name, r, k.threads)
		}
		if r.BlocksPerSM*k.threads*r.Registers > 65536 {
			t.Errorf("%s: %d blocks of %d threads at %d registers exceed an SM's 65536", k.name, r.BlocksPerSM, k.threads, r.Registers)
		}
	}
	if _, err := g.KernelResources("k_no_such_kernel", 128, 0); err == nil {
		t.Error("a kernel that is not loaded has resources")
	}
}

func TestFlashCarveout_parse(t *testing.T) {
	for v, want := range map[string]int{"": flashCarveoutUnset, "-1": -1, "0": 0, "100": 100, "50": 50} {
		t.Setenv("GODDP_FLASH_CARVEOUT", v)
		if got, err := flashCarveout(); err != nil || got != want {
			t.Errorf("GODDP_FLASH_CARVEOUT=%q: %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"101", "-2", "max", "1.5"} {
		t.Setenv("GODDP_FLASH_CARVEOUT", v)
		if _, err := flashCarveout(); err == nil || !strings.Contains(err.Error(), "GODDP_FLASH_CARVEOUT") {
			t.Errorf("GODDP_FLASH_CARVEOUT=%q: error %v, want one naming the variable", v, err)
		}
	}
}
