package ddp

import (
	"context"

	"github.com/goddp/goddp/allreduce"
)

// Comm is what the engine needs of a process group; *allreduce.Group implements it. All calls are
// collectives: every rank makes them in the same order. AllReduce (ReduceScatter under
// optimizer-state sharding) is called from the engine's comm goroutine, the others from the
// training goroutine, never at the same time.
type Comm interface {
	Rank() int
	Size() int
	AllReduce(ctx context.Context, buf []float32, op allreduce.Op, wire allreduce.Wire) error
	ReduceScatter(ctx context.Context, buf []float32, op allreduce.Op, wire allreduce.Wire) error
	AllGatherSegments(ctx context.Context, buf []float32, wire allreduce.Wire) error
	BroadcastF32(ctx context.Context, buf []float32, root int) error
	AllGather(ctx context.Context, send []byte) ([][]byte, error)
}

var _ Comm = (*allreduce.Group)(nil)
