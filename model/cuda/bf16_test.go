//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// The bf16 instantiation (bf16.go): the f16 sources are compiled as they are, the bf16 ones differ
// only in the swapped definitions, and the device's narrowing gives the host's bits.

// TestBF16_instantiate needs no GPU: the f16 instantiation of each source is the source itself
// (the same bytes, so the same PTX and cache file as before bf16 existed), and the bf16 one
// has no f16 conversion or f16 mma left and differs from it only where a swap applies.
func TestBF16_instantiate(t *testing.T) {
	for _, c := range []struct {
		name  string
		src   string
		swaps [][2]string
	}{{"kernels", kernelSource, bf16Swaps}, {"flash", flashKernelSource, flashBF16Swaps}, {"staging", stagingKernelSource, bf16Swaps}} {
		f16, err := instantiate(c.src, tensor.F16, c.swaps)
		if err != nil || f16 != c.src {
			t.Errorf("%s: the f16 instantiation is not the source (err %v)", c.name, err)
		}
		bf, err := instantiate(c.src, tensor.BF16, c.swaps)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, bad := range []string{"cvt.rn.f16.f32", "cvt.f32.f16", ".f16.f16"} {
			if strings.Contains(bf, bad) {
				t.Errorf("%s: the bf16 instantiation still has %q", c.name, bad)
			}
		}
		back := bf
		for _, s := range c.swaps {
			back = strings.Replace(back, s[1], s[0], 1)
		}
		if back != c.src {
			t.Errorf("%s: the bf16 instantiation differs from the f16 source outside the swaps", c.name)
		}
		if kernelNameRE.FindAllString(bf, -1) == nil || len(kernelNameRE.FindAllString(bf, -1)) != len(kernelNameRE.FindAllString(c.src, -1)) {
			t.Errorf("%s: the instantiations have different kernels", c.name)
		}
	}
	if _, err := instantiate("no definitions here", tensor.BF16, bf16Swaps); err == nil {
		t.Error("a source without the f16 definitions instantiated in bf16")
	}
	if _, err := instantiate(kernelSource, tensor.F32, bf16Swaps); err == nil {
		t.Error("an f32 instantiation was made")
	}
}

// TestBF16_kn needs no GPU: kernel names pick the module by the tensors' dtypes.
func TestBF16_kn(t *testing.T) {
	c := cpu.New()
	h, b, f := c.Alloc(tensor.F16, "h", 2), c.Alloc(tensor.BF16, "b", 2), c.Alloc(tensor.F32, "f", 2)
	if got := kn("k_add", f, h, nil); got != "k_add" {
		t.Errorf("f32+f16: %q", got)
	}
	if got := kn("k_add", f, b, nil); got != "k_add"+bf16Suffix {
		t.Errorf("f32+bf16: %q", got)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "f16 and bf16") {
				t.Errorf("f16+bf16: panic %v", r)
			}
		}()
		kn("k_add", h, b)
	}()
}

// The device's f32 → bf16 narrowing (Copy, k_cast and k_cast8) gives half.BF16FromFloat32's bits on
// ties, near-ties, subnormals, the largest finite values and overflow; widening is exact.
func TestCUDA_bf16RoundingMatchesHost(t *testing.T) {
	g := gpu(t)
	if err := g.CheckCompute(tensor.BF16); err != nil {
		t.Skipf("no bf16 on %s: %v", g.DeviceName(), err)
	}
	var xs []float32
	for _, u := range []uint32{
		0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // ties to even (down, up), just above and below a tie
		0xbf808000, 0xbf818000, // negative ties
		0x00000001, 0x00008000, 0x00018000, 0x807fffff, // subnormals
		0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000, // around the largest bf16, and overflow to ±inf
		0x7f800000, 0xff800000, 0, 0x80000000,
	} {
		xs = append(xs, math.Float32frombits(u))
	}
	for i := 0; len(xs) < 4096; i++ { // and a sweep of ordinary values
		xs = append(xs, float32(math.Sin(float64(i)*1.7))*float32(math.Pow(2, float64(i%40-20))))
	}
	for _, n := range []int{len(xs), len(xs) - 3} { // 8-wide and scalar kernels
		src := tensor.FromHost(g, tensor.F32, "x", xs[:n], n)
		dst := g.Alloc(tensor.BF16, "y", n)
		g.Copy(dst, src)
		got := tensor.ToHost(dst)
		back := g.Alloc(tensor.F32, "z", n)
		g.Copy(back, dst)
		wide := tensor.ToHost(back)
		for i := 0; i < n; i++ {
			want := half.BF16ToFloat32(half.BF16FromFloat32(xs[i]))
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Errorf("n=%d: %#08x → bf16 %#08x, want %#08x", n, math.Float32bits(xs[i]), math.Float32bits(got[i]), math.Float32bits(want))
			}
			if math.Float32bits(wide[i]) != math.Float32bits(want) {
				t.Errorf("n=%d: bf16 %#08x widened to %#08x on the device", n, math.Float32bits(want), math.Float32bits(wide[i]))
			}
		}
		g.Free(src)
		g.Free(dst)
		g.Free(back)
	}
}

// The fused attention kernels in bf16 against the CPU's reference, as the f16 test does.
func TestCUDA_flashAttentionBF16MatchesCPU(t *testing.T) {
	g := gpu(t)
	if !g.FlashAttentionFast(64, tensor.BF16) {
		t.Skipf("no bf16 fused attention on %s", g.DeviceName())
	}
	base := g.Stats().Allocated
	for i, sh := range [][3]int{{1, 1, 1}, {2, 64, 3}, {2, 100, 2}, {1, 200, 12}, {1, 1024, 2}} {
		B, T, H := sh[0], sh[1], sh[2]
		C := 64 * H
		c := cuOpCase{fmt.Sprintf("FlashAttention/bf16/B%d.T%d.H%d", B, T, H), func(m *cuMaker) []*tensor.Tensor {
			qkv := m.in(tensor.BF16, B, T, 3*C)
			y, lse := m.out(tensor.BF16, B, T, C), m.out(tensor.F32, B, H, T)
			m.dev.FlashAttention(y, lse, qkv, H, 0.125)
			dy := m.in(tensor.BF16, B, T, C)
			dqkv := m.out(tensor.BF16, B, T, 3*C)
			m.dev.FlashAttentionBackward(dqkv, dy, qkv, y, lse, H, 0.125)
			return []*tensor.Tensor{y, lse, dqkv}
		}}
		cuRunCase(t, g, c, uint64(700+i))
	}
	g.Sync()
	if a := g.Stats().Allocated; a != base {
		t.Errorf("allocated %d after the bf16 flash tests, %d before\n%s", a, base, tensor.MemorySummary(g))
	}
}
