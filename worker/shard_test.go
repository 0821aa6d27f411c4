package worker

import (
	"fmt"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/worker/checkpoint"
)

// ddp.shard_optimizer: a shard with more than one rank, on any device (CUDA too, since issue 31's
// stage 2: the key is the user's choice), none alone.
func TestOptimizerShardFor(t *testing.T) {
	cfg := tinyGPT(t, "ddp.shard_optimizer=true")
	dev := cpu.New()
	m, err := buildModel(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	sh := optimizerShardFor(cfg, Env{Rank: 1, WorldSize: 2}, ps)
	if sh == nil || sh.N() < ps.N/2-64 || sh.N() > ps.N/2+64 {
		t.Fatalf("world 2: shard %v", sh)
	}
	if sh := optimizerShardFor(cfg, Env{Rank: 0, WorldSize: 1}, ps); sh != nil {
		t.Fatalf("world 1: shard %v; want none", sh)
	}
	off := tinyGPT(t)
	if sh := optimizerShardFor(off, Env{Rank: 0, WorldSize: 2}, ps); sh != nil {
		t.Fatalf("ddp.shard_optimizer off: shard %v; want none", sh)
	}
}

// The ranks that keep the gathered shard files are the checkpoint's writers, found from the job's
// shape alike on every rank: rank 0; with checkpoint.per_host, local rank 0 of every host, the
// ranks numbered host by host (the launcher's rendezvous; LOCAL_WORLD_SIZE 1: every rank its own
// host, as cmd/ddptrain's twoHosts runs).
func TestShardFileKeepers(t *testing.T) {
	for _, c := range []struct {
		perHost           bool
		world, localWorld int
		want              string
	}{
		{false, 4, 2, "[true false false false]"},
		{true, 4, 2, "[true false true false]"},
		{true, 6, 3, "[true false false true false false]"},
		{true, 2, 1, "[true true]"},
		{false, 2, 1, "[true false]"},
		{true, 2, 2, "[true false]"},
	} {
		keep := shardFileKeepers(c.perHost, c.world, c.localWorld)
		if got := fmt.Sprint(keep); got != c.want {
			t.Errorf("per_host %v, world %d, %d a host: %s, want %s", c.perHost, c.world, c.localWorld, got, c.want)
		}
		for r, k := range keep {
			if w := checkpoint.IsWriter(c.perHost, r, r%c.localWorld); k != w {
				t.Errorf("per_host %v, world %d, %d a host: rank %d keeps %v, writes %v", c.perHost, c.world, c.localWorld, r, k, w)
			}
		}
	}
}
