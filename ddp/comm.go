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
	// GatherTo is AllGather whose blocks only the ranks with keep[rank] collect; the others
	// pass them on, holding one block at most, and get nil for every rank's but their own
	// (allreduce.Group.GatherTo). The checkpoint's optimizer shard files go to the writers so.
	GatherTo(ctx context.Context, send []byte, keep []bool) ([][]byte, error)
}

var (
	_ Comm = (*allreduce.Group)(nil)
	_ Comm = (*allreduce.Hierarchy)(nil)
)
