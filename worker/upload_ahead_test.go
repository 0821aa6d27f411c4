package worker

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// data.upload_ahead: on trains the run that off trains, bit for bit (the same batches in the same
// order, each micro-step's dropout seed its own), with accumulation and an evaluation after every
// step, and every micro-step after the run's first takes the batch uploaded during the one before.
// A checkpoint written while the next batch was already shown by the loader's Peek (every step's
// end but the last) resumes at that batch: resumed from step 2, the run ends where the
// uninterrupted one ends.
func TestUploadAhead_sameRunAndResume(t *testing.T) {
	sets := []string{"train.grad_accum_steps=2", "model.dropout=0.1", "train.eval_every=1", "train.eval_batches=1"}
	off := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "off"), sets...), Options{})

	dir := filepath.Join(t.TempDir(), "on")
	on := append(sets, "data.upload_ahead=on")
	tr, err := New(context.Background(), resumable(t, dir, on...), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background())
	tr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.ParamSHA256 != off.ParamSHA256 || res.FinalLoss != off.FinalLoss {
		t.Errorf("upload_ahead on: %s, loss %g; off: %s, loss %g", res.ParamSHA256, res.FinalLoss, off.ParamSHA256, off.FinalLoss)
	}
	if want := 4*2 - 1; tr.aheadTaken != want {
		t.Errorf("%d micro-steps took a batch uploaded ahead, want %d (all but the first)", tr.aheadTaken, want)
	}

	again := mustRun(t, resumable(t, filepath.Join(t.TempDir(), "again"), on...), Options{ResumeFrom: stepDir(dir, 2)})
	if again.ParamSHA256 != off.ParamSHA256 {
		t.Errorf("resumed from step 2 of the upload_ahead run: %s, the uninterrupted run %s", again.ParamSHA256, off.ParamSHA256)
	}
}

// data.upload_ahead resolved: auto is on where the device copies while it computes (a device that
// is not tensor.HostMemory, as --device cuda) and off on the CPU device; on and off are the user's.
func TestUploadAhead_autoByDevice(t *testing.T) {
	host := cpu.New()
	copying := struct{ tensor.Device }{host} // hides HostMemory: what the CUDA device looks like here
	if _, ok := tensor.Device(copying).(tensor.HostMemory); ok {
		t.Fatal("the wrapper still looks like host memory")
	}
	for _, c := range []struct {
		set  string
		dev  tensor.Device
		want bool
	}{
		{"auto", host, false}, {"auto", copying, true},
		{"on", host, true}, {"on", copying, true},
		{"off", host, false}, {"off", copying, false},
	} {
		cfg := tinyGPT(t, "data.upload_ahead="+c.set)
		if got := uploadAhead(cfg, c.dev); got != c.want {
			t.Errorf("data.upload_ahead %s on %T: %v, want %v", c.set, c.dev, got, c.want)
		}
	}
}

// ddp.shard_master resolved for a sharded optimizer: auto is on for the CPU device under fp16 and
// bf16, and on a copying device (as --device cuda) under fp16 only (what the whole -tags cuda
// suite ran, session 17); never under fp32 or without a shard; on and off are the user's.
func TestShardMaster_autoByDeviceAndPrecision(t *testing.T) {
	host := cpu.New()
	copying := struct{ tensor.Device }{host}
	shard := &model.Shard{}
	for _, c := range []struct {
		prec, set string
		dev       tensor.Device
		want      bool
	}{
		{"fp16", "auto", host, true}, {"bf16", "auto", host, true}, {"fp32", "auto", host, false},
		{"fp16", "auto", copying, true}, {"bf16", "auto", copying, false}, {"fp32", "auto", copying, false},
		{"bf16", "on", copying, true}, {"fp16", "off", copying, false}, {"fp16", "off", host, false},
	} {
		tr := &Trainer{cfg: tinyGPT(t, "precision="+c.prec, "ddp.shard_optimizer=true", "ddp.shard_master="+c.set), dev: c.dev}
		if got := tr.shardMaster(shard); got != c.want {
			t.Errorf("precision %s, ddp.shard_master %s on %T: %v, want %v", c.prec, c.set, c.dev, got, c.want)
		}
		if tr.shardMaster(nil) {
			t.Errorf("precision %s, ddp.shard_master %s: on without a shard", c.prec, c.set)
		}
	}
}
