package worker

import (
	"testing"

	"github.com/goddp/goddp/model/cpu"
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
