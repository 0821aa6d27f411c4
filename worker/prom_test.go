package worker

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/goddp/worker/observe"
)

// promNames are the metrics docs/metrics.md lists.
var promNames = []string{
	"goddp_step_seconds", "goddp_samples_per_second", "goddp_tokens_per_second", "goddp_loss", "goddp_loss_scale",
	"goddp_grad_norm", "goddp_memory_allocated_bytes", "goddp_memory_reserved_bytes", "goddp_memory_peak_bytes",
	"goddp_step", "goddp_restarts", "goddp_eval_loss", "goddp_eval_accuracy", "goddp_steps_total",
	"goddp_skipped_steps_total", "goddp_comm_seconds_total", "goddp_comm_hidden_seconds_total",
	"goddp_wire_sent_bytes_total", "goddp_wire_received_bytes_total",
	"goddp_checkpoints_skipped_total", "goddp_refused_connections_total", "goddp_refusals_suppressed_total",
}

// scrape GETs url and returns the value of each sample, by name and labels as written.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: %s, %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Every rank serves its metrics over HTTP while it trains: after a few steps each named metric is
// there, labelled with the rank and the host, with the values of the run; the restart count is
// torchrun's variable when DDP_RESTART_COUNT is unset; Close stops the server.
func TestPrometheus_servesNamedMetrics(t *testing.T) {
	t.Setenv("DDP_RESTART_COUNT", "")
	t.Setenv("TORCHELASTIC_RESTART_COUNT", "2")
	cfg := tinyGPT(t, "train.micro_batch=4", "train.max_steps=4", "train.eval_every=2")
	var tr *Trainer
	var got map[string]float64
	tr, err := New(context.Background(), cfg, Options{Logger: quiet(), MetricsListen: "127.0.0.1:0", FaultHook: func(step int) error {
		if step == 3 { // steps 0-2 done, and the evaluation after step 2
			got = scrape(t, "http://"+tr.prom.Addr()+"/metrics")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	addr := tr.prom.Addr()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	labels := `{host="` + host + `",rank="0"}`
	for _, name := range promNames {
		if _, ok := got[name+labels]; !ok {
			t.Errorf("no %s%s in the scrape", name, labels)
		}
	}
	for name, want := range map[string]float64{"goddp_step": 3, "goddp_steps_total": 3, "goddp_skipped_steps_total": 0,
		"goddp_restarts": 2, "goddp_loss_scale": 1} {
		if v := got[name+labels]; v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for _, name := range []string{"goddp_step_seconds", "goddp_samples_per_second", "goddp_tokens_per_second", "goddp_loss",
		"goddp_grad_norm", "goddp_memory_allocated_bytes", "goddp_memory_reserved_bytes", "goddp_memory_peak_bytes", "goddp_eval_loss"} {
		if v := got[name+labels]; !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if v := got["goddp_tokens_per_second"+labels] / got["goddp_samples_per_second"+labels]; v != 32 {
		t.Errorf("tokens/s ÷ samples/s = %v, want the context, 32", v)
	}
	if _, ok := got["go_goroutines"+labels]; !ok {
		t.Error("no go_goroutines: the Go collector is not registered")
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("the metrics server still answers after Close")
	}
}

// JSONL lines: step lines carry the rank, a timestamp, the gradient norm (with grad clipping, and
// without it when metrics are written) and lr without float32 noise; eval lines samples and seconds.
func TestMetrics_stepAndEvalFields(t *testing.T) {
	for _, clip := range []string{"1", "0"} {
		p := filepath.Join(t.TempDir(), "m.jsonl")
		start := time.Now().Add(-time.Second)
		mustRun(t, tinyGPT(t, "train.micro_batch=4", "train.max_steps=4", "train.schedule=constant", "train.log_every=2",
			"train.eval_every=2", "train.grad_clip="+clip), Options{MetricsPath: p})
		raw, _ := os.ReadFile(p)
		if !strings.Contains(string(raw), `"lr":0.003,`) {
			t.Errorf("grad_clip %s: lr is not written as 0.003:\n%s", clip, raw)
		}
		f, err := observe.ReadMetrics(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Steps) != 2 || len(f.Evals) != 2 || f.Evals[1].Step != 4 { // step 2's and the end's
			t.Fatalf("grad_clip %s: %d step lines and %d eval lines, want 2 and 2 (the last at step 4)", clip, len(f.Steps), len(f.Evals))
		}
		for _, s := range f.Steps {
			if s.Rank != 0 || s.Time.Before(start) || s.Time.After(time.Now()) || s.Time.Location() != time.UTC {
				t.Errorf("grad_clip %s: step %d: rank %d, time %v", clip, s.Step, s.Rank, s.Time)
			}
			if s.GradNorm == nil || !(*s.GradNorm > 0) {
				t.Errorf("grad_clip %s: step %d: grad_norm %v, want > 0", clip, s.Step, s.GradNorm)
			}
		}
		e := f.Evals[0]
		if e.Step != 2 || e.Samples != 8 || !(e.Seconds > 0) || e.Time.IsZero() {
			t.Errorf("grad_clip %s: eval line %+v, want step 2, 8 samples (2 batches of 4), seconds > 0, a time", clip, e)
		}
	}
}
