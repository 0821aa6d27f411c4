package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
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

// mirrorDev is the CPU device claiming tensor.PeerMirrorDevice, for the checks before the engine.
type mirrorDev struct{ *cpu.Device }

func (mirrorDev) NewPeerMirror(*tensor.Tensor, int, int) (tensor.PeerMirror, error) {
	return nil, errors.New("not here")
}

// ddp.shard_gather: device is refused, in one line naming the key, on a device that cannot map its
// peers' memory and in a world of several hosts, before the engine is asked; host is nothing to
// do, and so is auto where device would be refused (the engine is not asked: nil here).
func TestShardGatherDevice_refusals(t *testing.T) {
	ctx := context.Background()
	defer func(f func() (int, error)) { visibleGPUs = f }(visibleGPUs)
	visibleGPUs = func() (int, error) { return 2, nil }
	for _, c := range []struct {
		gather string
		dev    tensor.Device
		env    Env
		want   string // "" for no error
	}{
		{"auto", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"host", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"device", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, "ddp.shard_gather: device needs --device cuda (this run's device is cpu"},
		{"device", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 2}, "ddp.shard_gather: device with 2 hosts"},
		{"auto", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 2}, ""}, // several hosts: the host ring, no engine asked
		{"auto", mirrorDev{cpu.New()}, Env{WorldSize: 1, LocalWorldSize: 1}, ""}, // alone: nothing gathered
		{"auto", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, ""}, // two GPUs (below): not measured, the host ring
	} {
		tr := &Trainer{cfg: tinyGPT(t, "ddp.shard_optimizer=true", "ddp.shard_gather="+c.gather), dev: c.dev, env: c.env}
		err := tr.shardGatherDevice(ctx, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.gather, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s on %s, %d hosts: %v; want one line with %q", c.gather, c.dev.Name(), c.env.WorldSize/c.env.LocalWorldSize, err, c.want)
		}
	}
}

// ddp.shard_reduce: device is refused, in one line naming the key, on a device that cannot map its
// peers' memory and in a world of several hosts, before the engine is asked; host and auto (host
// for now) are nothing to do (the engine is not asked: nil here).
func TestShardReduceDevice_refusals(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		reduce string
		dev    tensor.Device
		env    Env
		want   string // "" for no error
	}{
		{"auto", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"host", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"device", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, "ddp.shard_reduce: device needs --device cuda (this run's device is cpu"},
		{"device", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 2}, "ddp.shard_reduce: device with 2 hosts"},
	} {
		tr := &Trainer{cfg: tinyGPT(t, "ddp.shard_optimizer=true", "ddp.shard_reduce="+c.reduce), dev: c.dev, env: c.env}
		err := tr.shardReduceDevice(ctx, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.reduce, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s on %s, %d hosts: %v; want one line with %q", c.reduce, c.dev.Name(), c.env.WorldSize/c.env.LocalWorldSize, err, c.want)
		}
	}
}

// ddp.intra_host: copies is refused, in one line naming the key, on a device that cannot map its
// peers' memory and in a world of several hosts, before the engine is asked; host is not this
// function's, nor auto on two GPUs (TestIntraHostCopies_auto has auto's cases; the engine is not
// asked: nil here).
func TestIntraHostCopies_refusals(t *testing.T) {
	ctx := context.Background()
	defer func(f func() (int, error)) { visibleGPUs = f }(visibleGPUs)
	visibleGPUs = func() (int, error) { return 2, nil } // as on any machine, a CUDA build's on one GPU too
	for _, c := range []struct {
		intra string
		dev   tensor.Device
		env   Env
		want  string // "" for no error
	}{
		{"auto", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"host", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, ""},
		{"copies", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, "ddp.intra_host: copies needs --device cuda (this run's device is cpu"},
		{"copies", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 2}, "ddp.intra_host: copies with 2 hosts"},
	} {
		tr := &Trainer{cfg: tinyGPT(t, "precision=fp16", "ddp.intra_host="+c.intra), dev: c.dev, env: c.env}
		err := tr.intraHostCopies(ctx, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.intra, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s on %s, %d hosts: %v; want one line with %q", c.intra, c.dev.Name(), c.env.WorldSize/c.env.LocalWorldSize, err, c.want)
		}
	}
}

// ddp.intra_host: auto takes copies only where it was measured: every rank on this host, several
// of them sharing its one GPU, the engine willing; everywhere else the host path, with the reason
// for the one Info line (none alone or on a device that cannot map its peers).
func TestIntraHostCopies_auto(t *testing.T) {
	defer func(f func() (int, error)) { visibleGPUs = f }(visibleGPUs)
	for _, c := range []struct {
		name    string
		dev     tensor.Device
		env     Env
		gpus    int
		refusal error
		take    bool
		why     string // a piece of the reason ("" for none at all)
	}{
		{"shared GPU", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, 1, nil, true, "the 2 ranks share this host's one GPU"},
		{"four on one GPU", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 4}, 1, nil, true, "the 4 ranks share"},
		{"two GPUs", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, 2, nil, false, "do not share one GPU (this rank sees 2 GPUs), and copies between several GPUs are not yet measured"},
		{"two hosts", mirrorDev{cpu.New()}, Env{WorldSize: 4, LocalWorldSize: 2}, 1, nil, false, "spans 2 hosts"},
		{"engine refuses", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, 1, errors.New("needs the f16 wire"), false, "copies would not apply: needs the f16 wire"},
		{"alone", mirrorDev{cpu.New()}, Env{WorldSize: 1, LocalWorldSize: 1}, 1, nil, false, ""},
		{"cpu", cpu.New(), Env{WorldSize: 2, LocalWorldSize: 2}, 1, nil, false, ""},
		{"hierarchical", mirrorDev{cpu.New()}, Env{WorldSize: 2, LocalWorldSize: 2}, 1, nil, false, "ddp.hierarchical asks for the host planes"},
	} {
		visibleGPUs = func() (int, error) { return c.gpus, nil }
		sets := []string{"precision=fp16"}
		if c.name == "hierarchical" {
			sets = append(sets, "ddp.hierarchical=true")
		}
		tr := &Trainer{cfg: tinyGPT(t, sets...), dev: c.dev, env: c.env}
		take, why := tr.copiesByAuto(c.refusal)
		if take != c.take || (c.why == "") != (why == "") || !strings.Contains(why, c.why) || strings.Contains(why, "\n") {
			t.Errorf("%s: copies %v (%q), want %v with %q", c.name, take, why, c.take, c.why)
		}
	}
	// The reason for copies suggests MPS where no daemon's pipe is seen, and not where one is.
	visibleGPUs = func() (int, error) { return 1, nil }
	mps := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", mps)
	tr := &Trainer{cfg: tinyGPT(t, "precision=fp16"), dev: mirrorDev{cpu.New()}, env: Env{WorldSize: 2, LocalWorldSize: 2}}
	if _, why := tr.copiesByAuto(nil); !strings.Contains(why, "no MPS daemon seen") {
		t.Errorf("no MPS pipe in %s: %q, want the MPS hint", mps, why)
	}
	if err := os.WriteFile(filepath.Join(mps, "control"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, why := tr.copiesByAuto(nil); strings.Contains(why, "MPS") {
		t.Errorf("an MPS pipe in %s: %q, want no hint", mps, why)
	}
	visibleGPUs = func() (int, error) { return 0, errors.New("no driver") }
	if take, why := tr.copiesByAuto(nil); take || !strings.Contains(why, "no driver") {
		t.Errorf("GPUs not counted: copies %v (%q), want the host path naming the error", take, why)
	}
}
