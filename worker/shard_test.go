package worker

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
)

// gpuNamed is the CPU device calling itself cuda: what ddp.shard_optimizer must refuse.
type gpuNamed struct{ *cpu.Device }

func (gpuNamed) Name() string { return "cuda" }

// ddp.shard_optimizer: a shard on the CPU device with more than one rank, none alone, and a clear
// refusal on CUDA (not yet).
func TestOptimizerShardFor(t *testing.T) {
	cfg := tinyGPT(t, "ddp.shard_optimizer=true")
	dev := cpu.New()
	m, err := buildModel(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	sh, err := optimizerShardFor(cfg, Env{Rank: 1, WorldSize: 2}, dev, ps)
	if err != nil || sh == nil || sh.N() < ps.N/2-64 || sh.N() > ps.N/2+64 {
		t.Fatalf("world 2: shard %v, %v", sh, err)
	}
	if sh, err := optimizerShardFor(cfg, Env{Rank: 0, WorldSize: 1}, dev, ps); sh != nil || err != nil {
		t.Fatalf("world 1: shard %v, %v; want none", sh, err)
	}
	_, err = optimizerShardFor(cfg, Env{Rank: 0, WorldSize: 2}, gpuNamed{dev}, ps)
	if err == nil || !strings.Contains(err.Error(), "not yet on CUDA") {
		t.Fatalf("on cuda: %v, want a refusal saying not yet on CUDA", err)
	}
}
