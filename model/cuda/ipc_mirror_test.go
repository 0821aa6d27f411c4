//go:build cuda

package cuda

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// tensor.PeerMirror among three ranks of this process (devices of their own on GPU 0: their
// addresses are used directly, as goroutine ranks do): each copies the other ranks' thirds of an
// odd-length f16 tensor into its own and holds every rank's values; bf16 and f32 too. A handle of
// another length is refused naming the rank; Pull out of range panics naming it. Not yet run on
// a GPU.
func TestCUDA_peerMirror(t *testing.T) {
	gpu(t)
	const W, n = 3, 1000003
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16, tensor.F32} {
		devs := make([]*Device, W)
		xs := make([]*tensor.Tensor, W)
		ms := make([]tensor.PeerMirror, W)
		handles := make([][]byte, W)
		val := func(q, i int) float32 { return float32(q) + float32(i%64)/64 }
		for r := range W {
			d, err := New(0)
			if err != nil {
				t.Fatal(err)
			}
			devs[r] = d
			v := make([]float32, n)
			for i := range v {
				v[i] = val(r, i)
			}
			xs[r] = d.Alloc(dt, "mirror", n)
			ipcUpload(d, xs[r], v)
			if ms[r], err = d.NewPeerMirror(xs[r], r, W); err != nil {
				t.Fatal(err)
			}
			handles[r] = ms[r].Handle()
		}
		for _, d := range devs {
			d.Sync() // every rank's upload has landed before a peer copies it
		}
		for r := range W {
			if err := ms[r].Connect(handles); err != nil {
				t.Fatalf("%s rank %d: %v", dt, r, err)
			}
		}
		for r := range W {
			for q := range W {
				lo, hi := q*n/W, (q+1)*n/W
				ms[r].Pull(q, lo, hi)
			}
		}
		for r := range W {
			got := make([]float32, n)
			devs[r].Download(got, xs[r])
			for q := range W {
				for i := q * n / W; i < (q+1)*n/W; i++ {
					if got[i] != val(q, i) {
						t.Fatalf("%s rank %d: element %d is %g, want rank %d's %g", dt, r, i, got[i], q, val(q, i))
					}
				}
			}
		}
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(p.(string), "from rank 1") {
					t.Errorf("%s: Pull past the end: %v, want a panic naming the rank", dt, p)
				}
			}()
			ms[0].Pull(1, n-1, n+1)
		}()
		y := devs[0].Alloc(dt, "odd", n-1)
		odd, err := devs[0].NewPeerMirror(y, 0, W)
		if err != nil {
			t.Fatal(err)
		}
		if err := odd.Connect(handles); err == nil || !strings.Contains(err.Error(), "rank 0 shares") {
			t.Errorf("%s: a mirror of another length connected: %v", dt, err)
		}
		odd.Close()
		devs[0].Free(y)
		for r := range W {
			if err := ms[r].Close(); err != nil {
				t.Error(err)
			}
		}
		for r := range W {
			devs[r].Free(xs[r])
			if err := devs[r].Close(); err != nil {
				t.Error(err)
			}
		}
	}
}
