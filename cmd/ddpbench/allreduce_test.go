package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for ddpbench: the bench starts its ranks as
// `<own executable> allreduce-worker ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "allreduce-worker" {
		if err := runAllReduceWorker(os.Args[2:]); err != nil {
			os.Stderr.WriteString("allreduce-worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// `ddpbench allreduce --channels 2` runs 2 real processes over 2 process groups each and reports
// one JSON row per size and wire with the channel count and the bytes a rank sent.
func TestAllReduceBench_channels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	err = runAllReduceBench([]string{"--nproc", "2", "--sizes", "256K", "--wire", "f16", "--iters", "2", "--warmup", "1", "--channels", "2", "--json", "--timeout", "20s"})
	w.Close()
	os.Stdout = stdout
	out := <-done
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rows []benchRow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var row benchRow
		if json.Unmarshal([]byte(l), &row) == nil && row.World > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("want 1 JSON row, got %d:\n%s", len(rows), out)
	}
	row := rows[0]
	// 256 KiB of f32 is 128 KiB on the f16 wire; a ring of 2 sends half of it per rank.
	if row.Channels != 2 || row.Bytes != 256<<10 || row.Wire != "f16" || row.BytesPerRank < 64<<10 {
		t.Errorf("row %+v: want channels 2, 262144 bytes, f16, at least 64 KiB sent per rank", row)
	}
}
