package observe

// prom.go: Prometheus metrics over HTTP. With metrics.listen (or ddptrain --metrics-port N, which
// is listen ":N") every rank serves GET /metrics from its own registry (not the client library's
// global one), each series labelled with the rank and the host. Rank r of a host listens on the
// port plus its LOCAL_RANK, so under ddplaunch --nproc-per-node 4 --metrics-port 9100 a host's
// ranks listen on 9100..9103, on every host; port 0 takes a port the system picks (logged). The
// loop sets the values after every step and evaluation (Prometheus is an Observer); the HTTP
// server reads them when scraped. docs/metrics.md lists the metrics with a scrape config.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goddp/goddp/allreduce/auth"
)

// Prometheus is one rank's metrics and the server that serves them. A nil *Prometheus is valid
// and does nothing. Its Observer methods are called by the loop only (Observer's contract); the
// metrics themselves are safe for the server to read meanwhile.
type Prometheus struct {
	srv  *http.Server
	addr string        // where it listens, port resolved
	done chan struct{} // closed when Serve has returned

	stepSeconds, samplesPerSec, tokensPerSec prometheus.Gauge
	loss, lossScale, gradNorm                prometheus.Gauge
	memAllocated, memReserved, memPeak       prometheus.Gauge
	step, restarts                           prometheus.Gauge
	evalLoss, evalAccuracy                   prometheus.Gauge
	steps, skipped                           prometheus.Counter
	commSeconds, commHidden                  prometheus.Counter
	wireSent, wireRecv                       prometheus.Counter
	ckptSkipped                              prometheus.Counter

	// The cumulative values the counters last caught up with (the loop's own).
	lastComm, lastHidden float64
	lastSent, lastRecv   int64
}

var _ Observer = (*Prometheus)(nil)

// promAddr is the address rank localRank of a host listens on: listen's port plus localRank
// (port 0 stays 0: the system picks one).
func promAddr(listen string, localRank int) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("worker: metrics listen address %q: want host:port, e.g. :9100", listen)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("worker: metrics listen address %q: port %q: want 0 to 65535", listen, port)
	}
	if p > 0 {
		p += localRank
		if p > 65535 {
			return "", fmt.Errorf("worker: metrics listen address %q: port %d + LOCAL_RANK %d is beyond 65535", listen, p-localRank, localRank)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// ServePrometheus registers the metrics and starts serving them on listen (promAddr); rank,
// localRank and restarts are the environment's (RANK, LOCAL_RANK, DDP_RESTART_COUNT or
// TORCHELASTIC_RESTART_COUNT). Close stops the server.
func ServePrometheus(listen string, rank, localRank, restarts int, log *slog.Logger) (*Prometheus, error) {
	addr, err := promAddr(listen, localRank)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	reg := prometheus.NewRegistry()
	r := prometheus.WrapRegistererWith(prometheus.Labels{"rank": strconv.Itoa(rank), "host": host}, reg)
	p := &Prometheus{done: make(chan struct{})}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "goddp", Name: name, Help: help})
		r.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "goddp", Name: name, Help: help})
		r.MustRegister(c)
		return c
	}
	p.stepSeconds = gauge("step_seconds", "Wall time of the last training step (forward, backward, all-reduce, optimizer).")
	p.samplesPerSec = gauge("samples_per_second", "Samples per second of the whole job over the last step (global batch / step time).")
	p.tokensPerSec = gauge("tokens_per_second", "Tokens per second of the whole job over the last step (language models; 0 for classifiers).")
	p.loss = gauge("loss", "Training loss of the last step.")
	p.lossScale = gauge("loss_scale", "The loss scaler's scale after the last step (1 under fp32 and bf16).")
	p.gradNorm = gauge("grad_norm", "Global L2 norm of the last measured step's gradients, unscaled and before clipping (every step with train.grad_clip, else every train.log_every steps).")
	p.memAllocated = gauge("memory_allocated_bytes", "Device bytes held by live tensors.")
	p.memReserved = gauge("memory_reserved_bytes", "Device bytes obtained by the caching allocator (allocated plus cached free blocks).")
	p.memPeak = gauge("memory_peak_bytes", "Highest allocated device bytes since training started.")
	p.step = gauge("step", "Optimizer steps done in the run (a resumed run starts at its checkpoint's step).")
	p.restarts = gauge("restarts", "Restarts of the job before this process (DDP_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT).")
	p.evalLoss = gauge("eval_loss", "Loss on the eval split at the last evaluation.")
	p.evalAccuracy = gauge("eval_accuracy", "Accuracy on the eval split at the last evaluation (classifiers; 0 for language models).")
	p.steps = counter("steps_total", "Optimizer steps this process has trained.")
	p.skipped = counter("skipped_steps_total", "Steps this process skipped because a gradient overflowed (inf/NaN, fp16).")
	p.commSeconds = counter("comm_seconds_total", "Time the gradient all-reduces took (per bucket, summed).")
	p.commHidden = counter("comm_hidden_seconds_total", "The part of comm_seconds_total that overlapped with backward.")
	p.wireSent = counter("wire_sent_bytes_total", "Bytes this rank handed to the transport in collectives, frame headers included.")
	p.wireRecv = counter("wire_received_bytes_total", "Bytes this rank received in collectives, frame headers included.")
	p.ckptSkipped = counter("checkpoints_skipped_total", "Checkpoints skipped because the previous one was still being written (a disk slower than checkpoint.every).")
	// Connections the allreduce listeners refused (no or a wrong token, not goddp's, too many
	// handshakes at once): all of them, and those whose log line the rate limit suppressed.
	r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "goddp", Name: "refused_connections_total",
		Help: "Connections the allreduce listeners refused (no or a wrong token, not goddp's, too many handshakes at once)."},
		func() float64 { l, s := auth.Refusals(); return float64(l + s) }))
	r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "goddp", Name: "refusals_suppressed_total",
		Help: "Refusals not logged because of the per-source rate limit (logged as \"suppressed N refusals from SRC in the last T\")."},
		func() float64 { _, s := auth.Refusals(); return float64(s) }))
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.restarts.Set(float64(restarts))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("worker: serving metrics: %w", err)
	}
	p.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/" {
			http.NotFound(w, req)
			return
		}
		fmt.Fprintln(w, "goddp rank", rank, "on", host, "— metrics at /metrics")
	})
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving Prometheus metrics", "url", "http://"+p.addr+"/metrics")
	return p, nil
}

// Addr is where the metrics are served, host:port (the port the system picked for port 0).
func (p *Prometheus) Addr() string {
	if p == nil {
		return ""
	}
	return p.addr
}

// Step records a finished training step (Observer).
func (p *Prometheus) Step(s StepRecord) {
	if p == nil {
		return
	}
	p.stepSeconds.Set(s.Seconds)
	if s.Seconds > 0 {
		sps := float64(s.Samples) / s.Seconds
		p.samplesPerSec.Set(sps)
		p.tokensPerSec.Set(sps * float64(s.TokensPerSample))
	}
	if !math.IsNaN(s.Loss) {
		p.loss.Set(s.Loss)
	}
	p.lossScale.Set(s.LossScale)
	if !math.IsNaN(s.GradNorm) && !math.IsInf(s.GradNorm, 0) {
		p.gradNorm.Set(s.GradNorm)
	}
	p.memAllocated.Set(float64(s.Mem.Allocated))
	p.memReserved.Set(float64(s.Mem.Reserved))
	p.memPeak.Set(float64(s.Mem.Peak))
	p.step.Set(float64(s.Step))
	p.steps.Inc()
	if s.Skipped {
		p.skipped.Inc()
	}
	comm, hidden := s.CommSeconds, s.CommSeconds*s.CommHiddenFraction
	p.commSeconds.Add(max(0, comm-p.lastComm))
	p.commHidden.Add(max(0, hidden-p.lastHidden))
	p.lastComm, p.lastHidden = comm, hidden
	sent, recv := s.WireSent, s.WireRecv
	p.wireSent.Add(float64(max(0, sent-p.lastSent)))
	p.wireRecv.Add(float64(max(0, recv-p.lastRecv)))
	p.lastSent, p.lastRecv = sent, recv
}

// Eval records an evaluation during training (Observer).
func (p *Prometheus) Eval(r EvalRecord) { p.setEval(r.Loss, r.Accuracy) }

// Summary records the run's last evaluation (Observer).
func (p *Prometheus) Summary(s SummaryMetrics) { p.setEval(s.EvalLoss, s.EvalAccuracy) }

// setEval records an evaluation; accuracy is nil for a language model.
func (p *Prometheus) setEval(loss float64, accuracy *float64) {
	if p == nil {
		return
	}
	p.evalLoss.Set(loss)
	if accuracy != nil {
		p.evalAccuracy.Set(*accuracy)
	}
}

// Close stops the server: a scrape in progress may finish (for a second), then it returns.
func (p *Prometheus) Close() error {
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.srv.Close()
	}
	<-p.done
	if err != nil {
		return fmt.Errorf("worker: stopping the metrics server: %w", err)
	}
	return nil
}

// CheckpointSkipped counts a checkpoint skipped while the previous one was still being written.
func (p *Prometheus) CheckpointSkipped() {
	if p != nil {
		p.ckptSkipped.Inc()
	}
}
