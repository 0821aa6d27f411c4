package ddp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// gatedComm holds every AllGatherSegments until open is closed, then fails it with fail when
// that is set.
type gatedComm struct {
	Comm
	open <-chan struct{}
	fail error
}

func (g gatedComm) AllGatherSegments(ctx context.Context, buf []float32, wire allreduce.Wire) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	if g.fail != nil {
		return g.fail
	}
	return g.Comm.AllGatherSegments(ctx, buf, wire)
}

// overlapRank trains one sharded step on an MLP (fp16 or fp32) with OverlapGather over comm and
// calls check between GatherParams and the next forward.
func overlapRank(t *testing.T, rank int, comm Comm, compute tensor.DType, d dataset,
	check func(eng *Engine, ps *model.Params)) {
	dev := cpu.New()
	m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nHidden, nClass}, Activation: "gelu", Compute: compute}, 3)
	if err != nil {
		t.Error(err)
		return
	}
	defer m.Free()
	ps := m.Params()
	const capMB = 0.0005
	sh := PlanShard(ps, capMB, comm.Size(), comm.Rank())
	opt, err := model.NewAdamWShard(ps, model.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, sh)
	if err != nil {
		t.Error(err)
		return
	}
	defer opt.Free()
	eng := New(ps, comm, Options{BucketCapMB: capMB, Wire: allreduce.WireF32, ShardOptimizer: true, OverlapGather: true})
	defer eng.Close()
	const b = 4
	x := dev.Alloc(tensor.F32, "x", b, nFeat)
	y := dev.Alloc(tensor.I32, "y", b)
	defer dev.Free(x)
	defer dev.Free(y)
	dev.Upload(x, d.x[rank*b*nFeat:(rank+1)*b*nFeat])
	dev.UploadI32(y, d.y[rank*b:(rank+1)*b])
	ctx := context.Background()
	m.Forward(model.Inputs{X: x, Targets: y, Valid: b}, true)
	eng.BeginMicro(0, 1)
	eng.BeginBackward()
	m.Backward(1)
	eng.EndBackward()
	if err := eng.Wait(ctx); err != nil {
		t.Error(err)
		return
	}
	opt.Step(0.01)
	check(eng, ps)
}

// With ddp.overlap_gather, GatherParams returns while the all-gather is still on the wire, and
// forward's first read of a parameter (its compute copy; under fp32 its master too) waits until
// that parameter's bucket has arrived: a layer never reads weights the gather has not written.
func TestGatherParams_overlapLeavesTheGatherToForward(t *testing.T) {
	for _, compute := range []tensor.DType{tensor.F32, tensor.F16} {
		t.Run(compute.String(), func(t *testing.T) {
			open := make(chan struct{})
			d := makeData(8)
			var once sync.Once
			// The gate opens once both ranks have seen their read blocked (or gave up on it).
			var checked sync.WaitGroup
			checked.Add(2)
			go func() { checked.Wait(); once.Do(func() { close(open) }) }()
			inprocWorld(t, 2, 1, func(r int, main Comm, _ []Comm) struct{} {
				var checkOnce sync.Once
				defer checkOnce.Do(checked.Done)
				overlapRank(t, r, gatedComm{Comm: main, open: open}, compute, d, func(eng *Engine, ps *model.Params) {
					returned := make(chan error, 1)
					go func() { returned <- eng.GatherParams(context.Background()) }()
					select {
					case err := <-returned:
						if err != nil {
							t.Errorf("rank %d: GatherParams: %v", r, err)
							return
						}
					case <-time.After(5 * time.Second):
						t.Errorf("rank %d: GatherParams waited for the gathers under OverlapGather", r)
						once.Do(func() { close(open) })
						<-returned
						return
					}
					first := ps.List[0] // forward's first read: the highest bucket, gathered first
					read := first.Compute
					if compute == tensor.F32 {
						// The f32 master (a norm's Master read) is the slab in flight: it waits too.
						read = first.Master
					} else {
						// The masters forward reads were gathered before the 16-bit flight.
						mread := make(chan struct{})
						go func() { first.Master(); close(mread) }()
						select {
						case <-mread:
						case <-time.After(5 * time.Second):
							t.Errorf("rank %d: under %s a read of %s's master waited for the 16-bit gather", r, compute, first.Name)
							once.Do(func() { close(open) })
							<-mread
						}
					}
					done := make(chan struct{})
					go func() { read(); close(done) }()
					select {
					case <-done:
						t.Errorf("rank %d: %s's weights were read before its bucket arrived", r, first.Name)
					case <-time.After(100 * time.Millisecond):
					}
					checkOnce.Do(checked.Done)
					select {
					case <-done:
					case <-time.After(5 * time.Second):
						t.Errorf("rank %d: the read of %s never returned after the gather was let through", r, first.Name)
					}
					if err := eng.Settle(); err != nil {
						t.Errorf("rank %d: Settle: %v", r, err)
					}
				})
				return struct{}{}
			})
		})
	}
}

// A gather that fails in flight does not hang the layer waiting for it, and its error — naming
// the bucket and the all-gather — comes from the next collective and every one after.
func TestGatherParams_overlapFailureComesBack(t *testing.T) {
	open := make(chan struct{})
	close(open)
	boom := errors.New("peer 1 hung up")
	d := makeData(8)
	inprocWorld(t, 2, 1, func(r int, main Comm, _ []Comm) struct{} {
		overlapRank(t, r, gatedComm{Comm: main, open: open, fail: boom}, tensor.F16, d, func(eng *Engine, ps *model.Params) {
			if err := eng.GatherParams(context.Background()); err != nil {
				t.Errorf("rank %d: GatherParams under OverlapGather: %v, want nil (the gather is in flight)", r, err)
			}
			for _, p := range ps.List {
				p.Compute() // returns: the failed buckets are marked arrived
			}
			for i, call := range []func() error{
				func() error { _, err := eng.RanksWith(context.Background(), false); return err },
				func() error { return eng.GatherMaster(context.Background()) },
			} {
				err := call()
				if !errors.Is(err, boom) || !strings.Contains(err.Error(), "all-gather of the f16 weights of bucket") {
					t.Errorf("rank %d, call %d after the failed gather: %v, want the gather's error naming its bucket", r, i, err)
				}
			}
		})
		return struct{}{}
	})
}
