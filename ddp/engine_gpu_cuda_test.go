//go:build cuda

package ddp

import (
	"math"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
)

// The staged path on the GPU: every rank is a goroutine with its own CUDA device (own streams,
// pool and staging buffers) on GPU 0, talking over the in-process transport.

func cudaDev(t *testing.T, rank int) (tensor.Device, func()) {
	d, err := cuda.New(0)
	if err != nil {
		t.Fatalf("rank %d: cuda.New(0): %v", rank, err)
	}
	return d, func() { d.Close() }
}

// Sizes large enough for many thread blocks, with odd lengths so buckets start at every
// alignment (the cast and widen kernels' vector and scalar paths).
var cudaStagingSizes = []int{1 << 20, 7, 3 * 4096, 3, 500001, 768, 1, 65537, 2, 1 << 18}

func TestCUDAStaged_averagesLikeHostPath(t *testing.T) {
	for _, W := range []int{2, 3} {
		staged, on := averageOnce(t, W, cudaStagingSizes, 1, cudaDev, false)
		for r, ok := range on {
			if !ok {
				t.Fatalf("W=%d rank %d: the CUDA device did not take the staged path", W, r)
			}
		}
		host, _ := averageOnce(t, W, cudaStagingSizes, 1, cudaDev, true)
		checkAverages(t, W, cudaStagingSizes, staged, host)
		// The GPU's cast (f32·(1/W), rounded to nearest even) and widen must give exactly what
		// the host-only stager gives: same half bits into the ring, same result.
		ref, _ := averageOnce(t, W, cudaStagingSizes, 1, stagingDev, false)
		for i := range ref[0] {
			if math.Float32bits(ref[0][i]) != math.Float32bits(staged[0][i]) {
				t.Fatalf("W=%d gradient %d: GPU staged %g, host stager %g (want the same bits)", W, i, staged[0][i], ref[0][i])
			}
		}
	}
}

// With `ddp.wire: bf16` the GPU stages in bf16 (the staging kernels' bf16 instantiation): the
// same checks as f16, and the same bits as the host-only bf16 stager.
func TestCUDAStaged_bf16WireAveragesLikeHostPath(t *testing.T) {
	d, done := cudaDev(t, 0)
	err := tensor.CheckCompute(d, tensor.BF16)
	done()
	if err != nil {
		t.Skipf("no bf16 on this GPU: %v", err)
	}
	for _, W := range []int{2, 3} {
		staged, on := averageOnceWire(t, W, cudaStagingSizes, 1, cudaDev, false, allreduce.WireBF16)
		for r, ok := range on {
			if !ok {
				t.Fatalf("W=%d rank %d: the CUDA device did not take the staged path with the bf16 wire", W, r)
			}
		}
		host, _ := averageOnceWire(t, W, cudaStagingSizes, 1, cudaDev, true, allreduce.WireBF16)
		checkAveragesUnit(t, W, cudaStagingSizes, staged, host, math.Pow(2, -6))
		ref, _ := averageOnceWire(t, W, cudaStagingSizes, 1, wireStagingDev, false, allreduce.WireBF16)
		for i := range ref[0] {
			if math.Float32bits(ref[0][i]) != math.Float32bits(staged[0][i]) {
				t.Fatalf("W=%d gradient %d: GPU bf16 staged %g, host bf16 stager %g (want the same bits)", W, i, staged[0][i], ref[0][i])
			}
		}
	}
}

func TestCUDAStaged_trainsIdentically(t *testing.T) {
	staged := trainWorldStaged(t, 2, 8, 6, cudaDev, false)
	host := trainWorldStaged(t, 2, 8, 6, cudaDev, true)
	checkTraining(t, staged, host)
	for r, o := range host {
		if o.hash != host[0].hash {
			t.Fatalf("host path: rank %d param_sha256 differs", r)
		}
	}
}
