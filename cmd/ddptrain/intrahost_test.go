package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ddp.intra_host: device on the CPU device: every rank refuses it in one line naming the key and
// the device, before any step (the device path needs --device cuda; ddp/engine_device.go).
func TestTrain_intraHostDeviceRefusedOnCPU(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	const world = 2
	outs, errs := make([]string, world), make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		args := append(smallRun(t, filepath.Join(dir, "ck")), "--set", "train.max_steps=4", "--set", "ddp.intra_host=device")
		cmd := exec.Command(filepath.Join(binaries(t), "ddptrain"), args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DDP_TOKEN=e2e")
		wg.Go(func() {
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
		})
	}
	wg.Wait()
	for r := range world {
		if errs[r] == nil {
			t.Fatalf("rank %d trained with ddp.intra_host: device on the CPU:\n%s", r, outs[r])
		}
		if !strings.Contains(outs[r], "ddp.intra_host: device needs --device cuda (this run's device is cpu") {
			t.Fatalf("rank %d: no one-line refusal naming the key and the device:\n%s", r, outs[r])
		}
	}
}
