package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// asTrainer makes the fake job's program goddp's trainer by name (a link named ddptrain to the
// test binary), so the launcher reads its exit codes as the trainer's.
func asTrainer(t *testing.T, o Options) Options {
	t.Helper()
	link := filepath.Join(t.TempDir(), Trainer)
	if err := os.Symlink(o.Program, link); err != nil {
		t.Fatal(err)
	}
	o.Program = link
	return o
}

// The trainer's rank 0 found the drawn MASTER_PORT taken (exit ExitMasterPortTaken): with no
// --master-port the launcher starts the same workers again on a new port, and that is not a
// restart (--max-restarts 0 still succeeds; DDP_RESTART_COUNT stays 0).
func TestRun_masterPortTakenRedraws(t *testing.T) {
	j := newFakeJob(t)
	o := asTrainer(t, j.options(2, "env,sleep:300ms", map[int]string{0: "env,failonce:5"}))
	if err := waitRun(t, runAsync(o), 60*time.Second); err != nil {
		t.Fatalf("Run: %v\n%s", err, j.stderr)
	}
	if !strings.Contains(j.stderr.String(), "was taken by another process before rank 0 could listen on it") ||
		!strings.Contains(j.stderr.String(), "not a restart; 1 of 3") {
		t.Errorf("the redraw is not logged:\n%s", j.stderr)
	}
	counts, ports := map[string]int{}, map[string]bool{}
	for _, l := range j.stdout.lines() {
		if v, ok := strings.CutPrefix(l, "[rank 0] env DDP_RESTART_COUNT="); ok {
			counts[v]++
		}
		if v, ok := strings.CutPrefix(l, "[rank 0] env MASTER_PORT="); ok {
			ports[v] = true
		}
	}
	if counts["0"] != 2 || len(counts) != 1 || len(ports) != 2 {
		t.Errorf("rank 0 ran with restart counts %v on ports %v: want 0 twice, two ports", counts, ports)
	}
}

// A port the user chose is theirs: the same failure then ends the job (no restarts asked for), as
// does a fourth taken port in a row, and another program's exit 5 is only an exit status.
func TestRun_masterPortTakenFinal(t *testing.T) {
	// attempts: how many times rank 0 ran (its env lines: a redraw keeps the restart count, which
	// names the fake's files).
	check := func(name string, o Options, j *fakeJob, attempts int) {
		t.Helper()
		err := waitRun(t, runAsync(o), 60*time.Second)
		var we *WorkerError
		if !errors.As(err, &we) || we.Rank != 0 || ExitCode(err) != ExitMasterPortTaken || we.Restarts != 0 {
			t.Fatalf("%s: Run: %v, want rank 0's exit status %d and no restart\n%s", name, err, ExitMasterPortTaken, j.stderr)
		}
		if n := strings.Count(j.stdout.String(), "[rank 0] env DDP_RESTART_COUNT=0"); n != attempts {
			t.Errorf("%s: rank 0 ran %d times, want %d\n%s", name, n, attempts, j.stderr)
		}
	}
	j := newFakeJob(t)
	o := asTrainer(t, j.options(2, "env,sleep:300ms", map[int]string{0: "env,exit:5"}))
	o.MasterPort = freePortT(t)
	check("--master-port", o, j, 1)

	j = newFakeJob(t)
	o = asTrainer(t, j.options(2, "env,sleep:300ms", map[int]string{0: "env,exit:5"}))
	check("always taken", o, j, 1+MaxPortRedraws)

	j = newFakeJob(t)
	o = j.options(2, "env,sleep:300ms", map[int]string{0: "env,exit:5"}) // not the trainer
	check("another program", o, j, 1)
}

func freePortT(t *testing.T) int {
	t.Helper()
	p, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
