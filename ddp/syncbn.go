package ddp

import (
	"context"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
)

// StatReducer is model.StatReducer over a process group: SyncBatchNorm's statistics summed in
// f32 (allreduce.WireF32: the gathered statistics travel exactly). g must be a group no other
// collective uses meanwhile — not the engine's, whose gradient buckets are all-reduced during
// the backward while the BatchNorm layers reduce theirs (the worker opens a channel of its own
// for it). ctx bounds every reduction until SetContext replaces it.
func StatReducer(ctx context.Context, g *allreduce.Group) *StatReduce {
	return &StatReduce{ctx: ctx, g: g}
}

// StatReduce is StatReducer's model.StatReducer.
type StatReduce struct {
	ctx context.Context
	g   *allreduce.Group
}

var _ model.StatReducer = (*StatReduce)(nil)

// SetContext makes ctx bound the reductions from now on (the training loop's, which outlives the
// setup's). Not concurrently with a forward or backward.
func (s *StatReduce) SetContext(ctx context.Context) { s.ctx = ctx }

func (s *StatReduce) Rank() int { return s.g.Rank() }
func (s *StatReduce) Size() int { return s.g.Size() }

// AllReduceSum sums buf over the group's ranks in f32.
func (s *StatReduce) AllReduceSum(buf []float32) error {
	return s.g.AllReduce(s.ctx, buf, allreduce.Sum, allreduce.WireF32)
}
