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
// multiples of 128 (and of 64), one row to 1024. Passed on an H100 (session 19's whole suite).
func TestCUDA_flashForward128SameBits(t *testing.T) {
	g := gpu(t)
	t.Setenv("GODDP_FLASH_WGMMA", "0") // k_flash_fwd128 against k_flash_fwd
	defer g.SetFlashForwardRows(64)    // the shared test device goes back to the default
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
		{"k_flash_bwd_dq_delta", 128, 2*tile + 64*4},
		{"k_flash_bwd_dkdv_ds", 128, 2*tile + 2*2*64*4 + 4*16*72*2},
		{"k_flash_bwd_dq_ds", 128, 2 * tile},
		{"k_flash_bwd_dq_ds2", 256, 0}, // its buffers are dynamic (flashDQPairShared)
	} {
		dyn := 0
		if k.name == "k_flash_bwd_dq_ds2" {
			dyn = flashDQPairShared
			g.allowDynShared(k.name, dyn) // what the launch does: over 48 KiB needs asking
		}
		r, err := g.KernelResources(k.name, k.threads, dyn)
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

// GODDP_FLASH_TILE_MAJOR and GODDP_FLASH_MINBLOCKS change which block runs when and how many
// registers ptxas may use, not what a block computes: the forward's output and log-sum-exp and
// the backward's dq, dk, dv are the bits of the kernels with neither (the grid (tiles, B·H), no
// register cap: a reference device made with TILE_MAJOR=0), f16 and bf16, on lengths that are
// and are not multiples of 64. Each variant is a device of its own (the options are compiled in
// at load). Passed on an H100 in session 17 (then against the default, which was the reference).
// GODDP_FLASH_EX2=1 (the exponentials without exp2f's subnormal handling, the default since
// session 20) gives the same bits too: its probabilities below 2^-126 are zeros in every product
// and sum they enter. So does GODDP_FLASH_PACK2=1 (pairs rounded by one cvt.rn.f16x2.f32: the same
// rounding of each value). Both passed on an H100 in session 20; the reference is exp2f's.
func TestCUDA_flashOptionsSameBits(t *testing.T) {
	gpu(t)
	t.Setenv("GODDP_FLASH_WGMMA", "0") // the mma.sync kernels' options
	t.Setenv("GODDP_FLASH_TILE_MAJOR", "0")
	t.Setenv("GODDP_FLASH_MINBLOCKS", "0,0,0") // no cap (unset caps dk/dv since session 23)
	t.Setenv("GODDP_FLASH_EX2", "0")
	t.Setenv("GODDP_FLASH_PACK2", "")
	t.Setenv("GODDP_FLASH_MASK_SPLIT", "")
	ref, err := New(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	variants := []struct{ tileMajor, minBlocks, ex2, pack, mask string }{{"1", "0,0,0", "0", "", ""}, {"0", "4,4,3", "0", "", ""}, {"1", "4,4,3", "0", "", ""}, {"1", "0,0,3", "0", "", ""},
		{"1", "0,0,0", "1", "", ""}, {"1", "0,0,0", "0", "1", ""}, {"1", "0,0,0", "1", "1", ""}, {"1", "0,0,0", "0", "", "1"}, {"0", "0,0,0", "0", "", "1"},
		{"", "", "", "", ""}, {"", "", "", "", "1"}} // the last two: the defaults, and with the mask split (not yet run on a GPU)
	type result struct {
		y, dqkv []uint16
		lse     []float32
	}
	run := func(d *Device, dt tensor.DType, B, T, H int, v []float32) result {
		C := 64 * H
		qkv := d.Alloc(dt, "qkv", B, T, 3*C)
		ipcUpload(d, qkv, v[:B*T*3*C])
		dy := d.Alloc(dt, "dy", B, T, C)
		ipcUpload(d, dy, v[B*T*3*C:])
		y, lse := d.Alloc(dt, "y", B, T, C), d.Alloc(tensor.F32, "lse", B, H, T)
		d.FlashAttention(y, lse, qkv, H, 0.125)
		dqkv := d.Alloc(dt, "dqkv", B, T, 3*C)
		d.FlashAttentionBackward(dqkv, dy, qkv, y, lse, H, 0.125)
		r := result{y: make([]uint16, y.Len()), dqkv: make([]uint16, dqkv.Len()), lse: make([]float32, lse.Len())}
		d.dtoh(unsafe.Pointer(&r.y[0]), y)
		d.dtoh(unsafe.Pointer(&r.dqkv[0]), dqkv)
		d.Download(r.lse, lse)
		for _, x := range []*tensor.Tensor{qkv, dy, y, lse, dqkv} {
			d.Free(x)
		}
		return r
	}
	shapes := [][3]int{{1, 1, 1}, {2, 100, 2}, {1, 200, 12}, {2, 1024, 3}}
	inputs := make([][]float32, len(shapes))
	for i, sh := range shapes {
		rng := rand.New(rand.NewPCG(uint64(i), 77))
		inputs[i] = make([]float32, sh[0]*sh[1]*4*64*sh[2])
		for j := range inputs[i] {
			inputs[i][j] = float32(rng.NormFloat64())
		}
	}
	for _, vr := range variants {
		t.Setenv("GODDP_FLASH_TILE_MAJOR", vr.tileMajor)
		t.Setenv("GODDP_FLASH_MINBLOCKS", vr.minBlocks)
		t.Setenv("GODDP_FLASH_EX2", vr.ex2)
		t.Setenv("GODDP_FLASH_PACK2", vr.pack)
		t.Setenv("GODDP_FLASH_MASK_SPLIT", vr.mask)
		d, err := New(0)
		if err != nil {
			t.Fatalf("TILE_MAJOR=%q MINBLOCKS=%q EX2=%q PACK2=%q MASK_SPLIT=%q: %v", vr.tileMajor, vr.minBlocks, vr.ex2, vr.pack, vr.mask, err)
		}
		for _, k := range []string{"k_flash_fwd", "k_flash_bwd_dq", "k_flash_bwd_dkdv"} {
			if r, err := d.KernelResources(k, 128, 0); err == nil {
				t.Logf("TILE_MAJOR=%q MINBLOCKS=%q %-16s %3d registers, %4d local bytes, %d blocks/SM", vr.tileMajor, vr.minBlocks, k, r.Registers, r.LocalBytes, r.BlocksPerSM)
			}
		}
		for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
			if !ref.FlashAttentionFast(64, dt) {
				continue
			}
			for i, sh := range shapes {
				want, got := run(ref, dt, sh[0], sh[1], sh[2], inputs[i]), run(d, dt, sh[0], sh[1], sh[2], inputs[i])
				for _, p := range []struct {
					name string
					a, b []uint16
				}{{"y", want.y, got.y}, {"dqkv", want.dqkv, got.dqkv}} {
					for j := range p.a {
						if p.a[j] != p.b[j] {
							t.Fatalf("TILE_MAJOR=%q MINBLOCKS=%q EX2=%q PACK2=%q MASK_SPLIT=%q %s %v: %s[%d] bits %#04x, the reference kernels' %#04x", vr.tileMajor, vr.minBlocks, vr.ex2, vr.pack, vr.mask, dt, sh, p.name, j, p.b[j], p.a[j])
						}
					}
				}
				for j := range want.lse {
					if math.Float32bits(want.lse[j]) != math.Float32bits(got.lse[j]) {
						t.Fatalf("TILE_MAJOR=%q MINBLOCKS=%q EX2=%q PACK2=%q MASK_SPLIT=%q %s %v: lse[%d] %g, the reference kernels' %g", vr.tileMajor, vr.minBlocks, vr.ex2, vr.pack, vr.mask, dt, sh, j, got.lse[j], want.lse[j])
					}
				}
			}
		}
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestFlashOptions_parse(t *testing.T) {
	t.Setenv("GODDP_FLASH_EX2", "0")
	t.Setenv("GODDP_FLASH_MASK_SPLIT", "")
	for _, c := range []struct {
		tile, minb string
		want       string
		major      bool
	}{
		{"", "", "-DFLASH_TILE_MAJOR=1 -DFLASH_DKDV_MINB=,3", true}, // the defaults since sessions 17 and 23
		{"0", "0,0,0", "", false},
		{"1", "0,0,0", "-DFLASH_TILE_MAJOR=1", true},
		{"1", "0, 3,0", "-DFLASH_TILE_MAJOR=1 -DFLASH_DQ_MINB=,3", true},
		{"0", "4,4,3", "-DFLASH_FWD_MINB=,4 -DFLASH_DQ_MINB=,4 -DFLASH_DKDV_MINB=,3", false},
		{"1", " 2, 2 ,1", "-DFLASH_TILE_MAJOR=1 -DFLASH_FWD_MINB=,2 -DFLASH_DQ_MINB=,2 -DFLASH_DKDV_MINB=,1", true},
	} {
		t.Setenv("GODDP_FLASH_TILE_MAJOR", c.tile)
		t.Setenv("GODDP_FLASH_MINBLOCKS", c.minb)
		opts, major, err := flashOptions()
		if err != nil || strings.Join(opts, " ") != c.want || major != c.major {
			t.Errorf("TILE_MAJOR=%q MINBLOCKS=%q: %q %v %v; want %q %v", c.tile, c.minb, opts, major, err, c.want, c.major)
		}
	}
	t.Setenv("GODDP_FLASH_TILE_MAJOR", "")
	t.Setenv("GODDP_FLASH_MINBLOCKS", "0,0,0")
	for ex2, want := range map[string]string{"1": "-DFLASH_TILE_MAJOR=1 -DFLASH_EX2_FTZ=1", "0": "-DFLASH_TILE_MAJOR=1", "": "-DFLASH_TILE_MAJOR=1 -DFLASH_EX2_FTZ=1"} {
		t.Setenv("GODDP_FLASH_EX2", ex2)
		if opts, _, err := flashOptions(); err != nil || strings.Join(opts, " ") != want {
			t.Errorf("EX2=%q: %q %v; want %q", ex2, opts, err, want)
		}
	}
	t.Setenv("GODDP_FLASH_EX2", "0")
	t.Setenv("GODDP_FLASH_PACK2", "1")
	if opts, _, err := flashOptions(); err != nil || strings.Join(opts, " ") != "-DFLASH_TILE_MAJOR=1 -DFLASH_PACK_X2=1" {
		t.Errorf("PACK2=1: %q %v", opts, err)
	}
	t.Setenv("GODDP_FLASH_PACK2", "")
	t.Setenv("GODDP_FLASH_MASK_SPLIT", "1")
	if opts, _, err := flashOptions(); err != nil || !strings.Contains(strings.Join(opts, " "), "-DFLASH_MASK_SPLIT=1") {
		t.Errorf("MASK_SPLIT=1: %q %v", opts, err)
	}
	t.Setenv("GODDP_FLASH_MASK_SPLIT", "")
	t.Setenv("GODDP_FLASH_PACK2", "x2")
	if _, _, err := flashOptions(); err == nil || !strings.Contains(err.Error(), "GODDP_FLASH_PACK2") {
		t.Errorf("PACK2=x2: error %v, want one naming the variable", err)
	}
	t.Setenv("GODDP_FLASH_PACK2", "")
	t.Setenv("GODDP_FLASH_EX2", "ftz")
	if _, _, err := flashOptions(); err == nil || !strings.Contains(err.Error(), "GODDP_FLASH_EX2") {
		t.Errorf("EX2=ftz: error %v, want one naming the variable", err)
	}
	t.Setenv("GODDP_FLASH_EX2", "")
	for _, c := range [][2]string{{"2", ""}, {"yes", ""}, {"", "4,4"}, {"", "4,4,-1"}, {"", "4,9,3"}, {"", "a,b,c"}} {
		t.Setenv("GODDP_FLASH_TILE_MAJOR", c[0])
		t.Setenv("GODDP_FLASH_MINBLOCKS", c[1])
		if _, _, err := flashOptions(); err == nil || !strings.Contains(err.Error(), "GODDP_FLASH_") {
			t.Errorf("TILE_MAJOR=%q MINBLOCKS=%q: error %v, want one naming the variable", c[0], c[1], err)
		}
	}
}

// GODDP_FLASH_DELTA_FOLD=1 (k_flash_bwd_dq_delta: the dq kernel makes the rows' delta, then dk/dv
// reads it; on the recomputing kernels, GODDP_FLASH_DS=0) gives the backward's dq, dk and dv with
// the bits of the separate delta pass, f16 and bf16, on lengths that are and are not multiples of
// 64 (passed on an H100, session 20).
func TestCUDA_flashDeltaFoldSameBits(t *testing.T) {
	flashBackwardSameBits(t, "GODDP_FLASH_DELTA_FOLD", "", "1", "k_flash_bwd_dq_delta")
}

// The default dS computed once (k_flash_bwd_dkdv_ds stores dSᵀ, k_flash_bwd_dq_ds multiplies it
// by K) gives the backward's dq, dk and dv with the bits of GODDP_FLASH_DS=0's kernels, which
// recompute dS for dq:
// the stored blocks are the values k_flash_bwd_dq packs (the products K·Qᵀ and V·dOᵀ in place of
// Q·Kᵀ and dO·Vᵀ, each element the same sum of the same products in the same order), f16 and
// bf16, on lengths that are and are not multiples of 64 (the last tiles' rows past T), one query
// tile to sixteen. Passed on an H100 (sessions 21 and 22).
func TestCUDA_flashDSSameBits(t *testing.T) {
	flashBackwardSameBits(t, "GODDP_FLASH_DS", "0", "", "k_flash_bwd_dq_ds")
}

func TestCUDA_flashDelta8SameBits(t *testing.T) {
	flashBackwardSameBits(t, "GODDP_FLASH_DELTA8", "0", "", "k_flash_bwd_delta8")
}

// The dS-once dq with two query tiles a block against one (dS once on for both runs; the shapes'
// tile counts are odd and even).
func TestCUDA_flashDQPairSameBits(t *testing.T) {
	flashBackwardSameBits(t, "GODDP_FLASH_DQ_PAIR", "", "1", "k_flash_bwd_dq_ds2", "GODDP_FLASH_DS", "1")
}

// flashBackwardSameBits checks that the attention backward's dqkv has the same bits with the knob
// env set to off and to on (read at each call), f16 and bf16, on several shapes, and that the knob
// took its path: kernel ran (the device's profile) with on and not with off. The other backward
// knob is at its off value for both runs (GODDP_FLASH_DELTA_FOLD unset, GODDP_FLASH_DS=0), so a
// suite run with it on still compares this one alone; fixed (name, value pairs) then sets what
// the knob needs for both runs (a dS-once kernel's GODDP_FLASH_DS=1).
func flashBackwardSameBits(t *testing.T, env, off, on, kernel string, fixed ...string) {
	g := gpu(t)
	t.Setenv("GODDP_FLASH_WGMMA", "0") // the mma.sync kernels (a suite run with the Hopper ones on failed here in session 25)
	t.Setenv("GODDP_FLASH_DELTA_FOLD", "")
	t.Setenv("GODDP_FLASH_DS", "0")
	for i := 0; i+1 < len(fixed); i += 2 {
		t.Setenv(fixed[i], fixed[i+1])
	}
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		if !g.FlashAttentionFast(64, dt) {
			continue
		}
		for i, sh := range [][3]int{{1, 1, 1}, {2, 100, 2}, {1, 200, 12}, {2, 1024, 3}} {
			B, T, H := sh[0], sh[1], sh[2]
			C := 64 * H
			rng := rand.New(rand.NewPCG(uint64(i), 78))
			v := make([]float32, B*T*4*C)
			for j := range v {
				v[j] = float32(rng.NormFloat64())
			}
			qkv, dy := g.Alloc(dt, "qkv", B, T, 3*C), g.Alloc(dt, "dy", B, T, C)
			ipcUpload(g, qkv, v[:B*T*3*C])
			ipcUpload(g, dy, v[B*T*3*C:])
			y, lse := g.Alloc(dt, "y", B, T, C), g.Alloc(tensor.F32, "lse", B, H, T)
			g.FlashAttention(y, lse, qkv, H, 0.125)
			var got [2][]uint16
			for k, val := range []string{off, on} {
				t.Setenv(env, val)
				dqkv := g.Alloc(dt, "dqkv", B, T, 3*C)
				g.Fill(dqkv, float32(k+7)) // every element written, whatever was there
				g.ProfileStart()
				g.FlashAttentionBackward(dqkv, dy, qkv, y, lse, H, 0.125)
				if ran := strings.Contains(g.ProfileStop(), kernel); ran != (k == 1) {
					t.Fatalf("%s %v: %s=%q: %s ran: %v", dt, sh, env, val, kernel, ran)
				}
				got[k] = make([]uint16, dqkv.Len())
				g.dtoh(unsafe.Pointer(&got[k][0]), dqkv)
				g.Free(dqkv)
			}
			for j := range got[0] {
				if got[0][j] != got[1][j] {
					t.Fatalf("%s %v: dqkv[%d] bits %#04x with %s=%q, %#04x with %q", dt, sh, j, got[1][j], env, on, got[0][j], off)
				}
			}
			for _, x := range []*tensor.Tensor{qkv, dy, y, lse} {
				g.Free(x)
			}
		}
	}
}
