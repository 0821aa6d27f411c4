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
// for it). ctx bounds every reduction.
func StatReducer(ctx context.Context, g *allreduce.Group) model.StatReducer {
	return &statReducer{ctx: ctx, g: g}
}

type statReducer struct {
	ctx context.Context
	g   *allreduce.Group
}

func (s *statReducer) Rank() int { return s.g.Rank() }
func (s *statReducer) Size() int { return s.g.Size() }
func (s *statReducer) AllReduceSum(buf []float32) error {
	return s.g.AllReduce(s.ctx, buf, allreduce.Sum, allreduce.WireF32)
}
