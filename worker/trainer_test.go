package worker

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// freeCounter counts Free calls of the model it wraps.
type freeCounter struct {
	model.Model
	frees *int
}

func (f freeCounter) Free() { *f.frees++; f.Model.Free() }

// Close gives back everything New took: the device is back at zero allocated bytes, and a second
// Close does nothing.
func TestTrainer_closeReleasesEverything(t *testing.T) {
	cfg := tinyGPT(t, "train.micro_batch=4")
	tr, err := New(context.Background(), cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	dev := tr.dev
	if dev.Stats().Allocated == 0 {
		t.Fatal("nothing allocated after New")
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if a := dev.Stats().Allocated; a != 0 {
		t.Errorf("%s still allocated after Close (live: %s)", tensor.FormatBytes(a), liveTags(dev))
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := tr.Run(context.Background()); err == nil {
		t.Error("Run after Close ran")
	}
}

// A New that fails partway (here at the last thing it opens, the metrics file) closes what it had
// opened, in reverse order: the model is freed once and the device is back at zero.
func TestTrainer_setupErrorClosesWhatWasOpened(t *testing.T) {
	var frees int
	var dev tensor.Device
	cfg := tinyGPT(t, "train.micro_batch=4")
	_, err := New(context.Background(), cfg, Options{Logger: quiet(), MetricsPath: filepath.Join(t.TempDir(), "no", "such", "dir", "m.jsonl"),
		wrapModel: func(m model.Model) model.Model {
			dev = m.Params().Device()
			return freeCounter{m, &frees}
		}})
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("New = %v, want the metrics file's error", err)
	}
	if frees != 1 {
		t.Errorf("model freed %d times, want 1", frees)
	}
	if a := dev.Stats().Allocated; a != 0 {
		t.Errorf("%s still allocated after a failed New (live: %s)", tensor.FormatBytes(a), liveTags(dev))
	}
}

// The fault hook stops the run with its error, before the step it names; nothing exits the
// process, and the config given to Run is not changed by it.
func TestTrainer_faultHookStopsTheRun(t *testing.T) {
	planted := errors.New("planted")
	cfg := tinyGPT(t, "train.micro_batch=auto", "train.global_batch=8", "train.memory_budget=12MiB",
		"checkpoint.dir="+filepath.Join(t.TempDir(), "ck-{node}"), "train.max_steps=3")
	before := cfg.YAML()
	var steps []int
	_, err := Run(context.Background(), cfg, Options{Logger: quiet(), FaultHook: func(step int) error {
		steps = append(steps, step)
		if step == 1 {
			return planted
		}
		return nil
	}})
	if !errors.Is(err, planted) || !strings.Contains(err.Error(), "before step 1") {
		t.Fatalf("Run = %v, want the planted error before step 1", err)
	}
	if len(steps) != 2 {
		t.Errorf("hook called at %v, want steps 0 and 1", steps)
	}
	if cfg.YAML() != before || cfg.Train.MicroBatch != 0 || strings.Contains(cfg.Checkpoint.Dir, "ck-0") {
		t.Errorf("Run changed its config:\n%s\nbecame\n%s", before, cfg.YAML())
	}
}

// The heartbeat writes at once and then every second until stopped, and stopping closes the fd.
func TestHeartbeat_beatsUntilStopped(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fd, err := syscall.Dup(int(w.Fd())) // the heartbeat owns (and closes) its fd, as in a worker
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	stop := startHeartbeat(fd)
	r.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b [1]byte
	if _, err := r.Read(b[:]); err != nil {
		t.Fatalf("no first heartbeat: %v", err)
	}
	if _, err := r.Read(b[:]); err != nil {
		t.Fatalf("no second heartbeat within a second or so: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		if _, err := r.Read(b[:]); err != nil {
			if err != io.EOF {
				t.Fatalf("after stop: %v, want EOF", err)
			}
			break
		}
	}
}
