package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/goddp/worker/observe"
)

// ddp.hierarchical on two "hosts" of two ranks each (started by hand as ddplaunch on two nodes
// would: RANK host·2+local, LOCAL_RANK, LOCAL_WORLD_SIZE 2, NODE_RANK): the rings inside each
// host and between them meet through the main group, the job trains, and all four replicas end
// with the same param_sha256.
func TestTrain_hierarchicalTwoHosts(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.jsonl")
	port := freePort(t)
	const world = 4
	outs, errs := make([]string, world), make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		args := append(smallRun(t, filepath.Join(dir, "ck")), "--set", "train.max_steps=12", "--set", "train.micro_batch=32", "--set", "ddp.hierarchical=true",
			"--set", "ddp.bucket_cap_mb=0.02", "--metrics", m)
		cmd := exec.Command(filepath.Join(binaries(t), "ddptrain"), args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE=4", "LOCAL_RANK="+strconv.Itoa(r%2),
			"LOCAL_WORLD_SIZE=2", "NODE_RANK="+strconv.Itoa(r/2), "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port), "DDP_TOKEN=e2e")
		wg.Go(func() {
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
		})
	}
	wg.Wait()
	for r := range world {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
	if !strings.Contains(outs[0], "hierarchical all-reduce") || !strings.Contains(outs[0], "local_ranks=2 hosts=2") {
		t.Fatalf("rank 0 does not say it reduces hierarchically:\n%s", outs[0])
	}
	want := summary(t, m).ParamSHA256
	for r := 1; r < world; r++ {
		if got := summary(t, observe.RankPath(m, r)).ParamSHA256; got != want {
			t.Fatalf("rank %d param_sha256 %s, rank 0 %s", r, got, want)
		}
	}
}
