//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// GODDP_EMB_SORTED=1's embedding backward (k_emb_sort, k_emb_bwd_sorted) adds each token's rows
// into its dwte row in position order, so it gives the CPU device's bits — dwte, f32, added into
// its values (dwpe's kernel is another, deterministic already) — and the same bits on a second
// run: f32, f16 and bf16 output gradients, a small
// vocabulary where every token repeats hundreds of times, GPT-2's 50304 with a skewed draw (a few
// hot tokens, as text has), B·T from 1 to 16384, widths 768 and 100. Passed on an H100 (session 19).
func TestCUDA_embeddingSortedMatchesCPU(t *testing.T) {
	t.Setenv("GODDP_EMB_SORTED", "1")
	g := gpu(t)
	ref := cpu.New()
	type shape struct{ B, T, V, C int }
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(g, dt) != nil {
			continue
		}
		for i, sh := range []shape{{1, 1, 10, 768}, {3, 37, 50, 100}, {4, 1024, 50304, 768}, {16, 1024, 50304, 768}} {
			rng := rand.New(rand.NewPCG(uint64(i)+41, uint64(dt)))
			n := sh.B * sh.T
			ids := make([]int32, n)
			for p := range ids {
				if rng.IntN(3) == 0 { // a third of the positions on ten hot tokens
					ids[p] = int32(rng.IntN(min(10, sh.V)))
				} else {
					ids[p] = int32(rng.IntN(sh.V))
				}
			}
			dout, wte0, wpe0 := normals(rng, n*sh.C), normals(rng, sh.V*sh.C), normals(rng, sh.T*sh.C)
			run := func(d tensor.Device) []float32 {
				id := d.Alloc(tensor.I32, "ids", sh.B, sh.T)
				d.UploadI32(id, ids)
				do := tensor.FromHost(d, dt, "dout", dout, n, sh.C)
				dw := tensor.FromHost(d, tensor.F32, "dwte", wte0, sh.V, sh.C)
				dp := tensor.FromHost(d, tensor.F32, "dwpe", wpe0, sh.T, sh.C)
				d.EmbeddingBackward(dw, dp, do, id)
				w := tensor.ToHost(dw)
				for _, z := range []*tensor.Tensor{id, do, dw, dp} {
					d.Free(z)
				}
				return w
			}
			want, got, again := run(ref), run(g), run(g)
			name := fmt.Sprintf("%s B %d T %d V %d C %d", dt, sh.B, sh.T, sh.V, sh.C)
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s: dwte element %d (token %d) is %g, the CPU's %g", name, j, j/sh.C, got[j], want[j])
				}
				if math.Float32bits(again[j]) != math.Float32bits(got[j]) {
					t.Fatalf("%s: dwte element %d is %g on a second run, %g on the first", name, j, again[j], got[j])
				}
			}
		}
	}
}
