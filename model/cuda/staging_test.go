//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// One plan, driven by hand: Stage must put exactly f16(g·scale) (rounded to nearest even, as the
// host encoder does) into pinned memory; what the host writes there must come back widened into
// exactly the bucket's range of the slab after Return and Finish, the rest untouched; twice, since
// the buffers are reused. Ranges cover the vector path and unaligned starts.
func TestCUDA_gradStaging(t *testing.T) {
	for _, wire := range []tensor.DType{tensor.F16, tensor.BF16} {
		t.Run(wire.String(), func(t *testing.T) { testGradStaging(t, wire) })
	}
}

// testGradStaging: in wire (f16, or bf16 for `ddp.wire: bf16`), the staged bits are the host's
// round-to-nearest-even of each value times the scale, and Return widens what the ring left.
func testGradStaging(t *testing.T, wire tensor.DType) {
	d := gpu(t)
	if wire == tensor.BF16 && d.CheckCompute(tensor.BF16) != nil {
		t.Skipf("no bf16 on %s", d.DeviceName())
	}
	f := half.F16
	if wire == tensor.BF16 {
		f = half.BF16
	}
	const n = 300007
	ranges := [][2]int{{0, 3}, {3, 100003}, {100003, 100004}, {100010, 300007}}
	before := d.PinnedBytes()
	g := d.Alloc(tensor.F32, "grads", n)
	defer d.Free(g)
	s, err := d.NewGradStagingWire(g, ranges, wire)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.PinnedBytes() - before; got < 2*n-2*6 || got != s.PinnedBytes() {
		t.Fatalf("pinned bytes grew by %d, plan holds %d", got, s.PinnedBytes())
	}
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 2; round++ {
		host := make([]float32, n)
		for i := range host {
			host[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
		}
		d.Upload(g, host)
		scale := float32(1) / float32(2+round)
		for i := range ranges {
			s.Stage(i, scale)
		}
		want := make([]float32, n)
		copy(want, host)
		for i, rg := range ranges {
			h := s.Host(i)
			if len(h) != rg[1]-rg[0] {
				t.Fatalf("bucket %d: %d halves, want %d", i, len(h), rg[1]-rg[0])
			}
			for j, v := range h {
				if e := f.FromFloat32(host[rg[0]+j] * scale); v != e {
					t.Fatalf("round %d bucket %d element %d: staged %#04x, want %#04x (%s of %g·%g)", round, i, j, v, e, f, host[rg[0]+j], scale)
				}
			}
			for j := range h { // what the ring would leave: something else, so the copy back shows
				h[j] = f.FromFloat32(float32(j%1000) - 500)
				want[rg[0]+j] = f.ToFloat32(h[j])
			}
			s.Return(i)
		}
		s.Finish()
		got := tensor.ToHost(g)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("round %d element %d: slab holds %g after Finish, want %g", round, i, got[i], want[i])
			}
		}
	}
	s.Close()
	if d.PinnedBytes() != before {
		t.Fatalf("pinned bytes %d after Close, want %d", d.PinnedBytes(), before)
	}
}
