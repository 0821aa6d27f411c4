package ddp

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/tensor"
)

// hierWorld runs rank(r, comm) for hosts × local ranks at once, comm each rank's
// allreduce.Hierarchy over in-process networks (the world's, one per host, one per local rank).
func hierWorld[R any](t *testing.T, hosts, local int, rank func(r int, comm Comm) R) []R {
	t.Helper()
	return hierWorldKill(t, hosts, local, func(r int, comm Comm, _ func()) R { return rank(r, comm) })
}

// hierWorldKill is hierWorld whose ranks may kill themselves: kill closes the rank's three groups,
// as its process dying would.
func hierWorldKill[R any](t *testing.T, hosts, local int, rank func(r int, comm Comm, kill func()) R) []R {
	t.Helper()
	W := hosts * local
	group := func(nw *allreduce.InprocNetwork, r, size int) *allreduce.Group {
		g, err := allreduce.NewGroup(context.Background(), allreduce.Config{Rank: r, WorldSize: size, Transport: nw.Transport(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	mainNw := allreduce.NewInprocNetwork(W)
	intraNw, interNw := make([]*allreduce.InprocNetwork, hosts), make([]*allreduce.InprocNetwork, local)
	for h := range intraNw {
		intraNw[h] = allreduce.NewInprocNetwork(local)
	}
	for l := range interNw {
		interNw[l] = allreduce.NewInprocNetwork(hosts)
	}
	out := make([]R, W)
	var wg sync.WaitGroup
	for r := range W {
		h, l := r/local, r%local
		mg := group(mainNw, r, W)
		hr, err := allreduce.NewHierarchy(mg, group(intraNw[h], l, local), group(interNw[l], h, hosts))
		if err != nil {
			t.Fatal(err)
		}
		kill := func() { hr.Close(); mg.Close() }
		wg.Go(func() { out[r] = rank(r, hr, kill) })
	}
	wg.Wait()
	return out
}

// ddp.hierarchical: the engine over a Hierarchy (two hosts of two ranks) keeps every replica
// bit-identical (the same param_sha256) and trains what the flat ring trains, within float32
// rounding of sums added in another order (2e-6 relative per weight after 6 steps with the f32
// wire, as TestEngine_equivalenceF32Wire allows against one process; the loss curve within 1% with
// the f16 wire).
func TestEngine_hierarchical(t *testing.T) {
	for _, c := range []struct {
		compute tensor.DType
		wire    allreduce.Wire
	}{{tensor.F32, allreduce.WireF32}, {tensor.F16, allreduce.WireF16}} {
		t.Run(fmt.Sprint(c.wire), func(t *testing.T) {
			hosts, local, b, k, steps := 2, 2, 3, 2, 6
			W := hosts * local
			d := makeData(W * b * k * steps)
			rc := runCfg{W: W, b: b, k: k, steps: steps, compute: c.compute, wire: c.wire, bucketMB: 0.0005, injectStep: -1}
			hier := hierWorld(t, hosts, local, func(r int, comm Comm) rankResult { return trainRank(t, rc, r, comm, d) })
			flat := runWorld(t, rc, d)
			for r, res := range hier {
				if res.hash == "" || res.hash != hier[0].hash {
					t.Fatalf("rank %d param_sha256 %q differs from rank 0's %q", r, res.hash, hier[0].hash)
				}
			}
			if hier[0].losses[steps-1] >= hier[0].losses[0] {
				t.Fatalf("loss did not fall: %v", hier[0].losses)
			}
			if c.wire == allreduce.WireF32 {
				if d := maxRelDiff(hier[0].weights, flat[0].weights); d > 2e-6 {
					t.Fatalf("hierarchical weights differ from the flat ring's by %g (> 2e-6)", d)
				}
			}
			for s := range flat[0].losses {
				if math.IsNaN(hier[0].losses[s]) || math.IsInf(hier[0].losses[s], 0) {
					t.Fatalf("step %d: loss %g", s, hier[0].losses[s])
				}
				if rel := math.Abs(hier[0].losses[s]-flat[0].losses[s]) / flat[0].losses[s]; rel > 1e-2 {
					t.Fatalf("step %d: loss %g hierarchical, %g flat", s, hier[0].losses[s], flat[0].losses[s])
				}
			}
		})
	}
}
