//go:build cuda

package cuda

import (
	"fmt"
	"testing"

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
