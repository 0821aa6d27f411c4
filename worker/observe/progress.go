package observe

// progress.go: what a person watching the run sees. On a terminal, rank 0
// draws a progress bar (step/total, loss, throughput, ETA) that redraws in
// place; anywhere else (a log file, CI) the same facts come as plain
// slog-style lines, one per Update, so logs stay greppable.
//
// Where the bar goes: under ddplaunch the workers' stderr is a pipe (the
// launcher prefixes each line with [rank N]), so the launcher passes its
// terminal to rank 0 as an open file descriptor, named in DDP_PROGRESS_FD
// (read with the rest of the environment: Env.ProgressFD). Run alone, ddptrain
// draws on stderr when stderr is a terminal.

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressThrottle is the least time between bar redraws (tests set 0).
var progressThrottle = 100 * time.Millisecond

// Progress reports training progress. Only rank 0 reports steps; Log lines
// come from every rank. Safe for concurrent use.
type Progress struct {
	mu    sync.Mutex
	rank  int
	total int // steps; 0 = unknown
	start time.Time
	first int // the step this process's training started at (Start): a resumed run's checkpoint

	bar *progressbar.ProgressBar // nil when not on a terminal or not rank 0
	out io.Writer                // where the bar, or the plain lines, go
	log *slog.Logger
}

// NewProgress chooses the output: a bar on the terminal at file descriptor
// progressFD (DDP_PROGRESS_FD, Env.ProgressFD; -1 for none) or on a terminal
// stderr (rank 0 only), plain log lines on stderr otherwise. total is the
// number of optimizer steps (0 if unknown).
func NewProgress(total, rank, progressFD int) *Progress {
	var w io.Writer = os.Stderr
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	if progressFD > 2 && term.IsTerminal(progressFD) {
		w, tty = os.NewFile(uintptr(progressFD), "progress-tty"), true
	}
	return newProgress(total, rank, w, tty)
}

// newProgress is NewProgress with the writer and the terminal decision given
// (tests).
func newProgress(total, rank int, w io.Writer, tty bool) *Progress {
	p := &Progress{rank: rank, total: total, start: time.Now(), out: w,
		log: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{}))}
	if tty && rank == 0 {
		p.bar = newBar(w, total)
	}
	return p
}

// newBar is the terminal bar over steps optimizer steps (a spinner when not known). Its count,
// elapsed time and predicted time are of the steps this process trains: after a resume, Start
// draws a new one over the steps left, so the prediction is the resumed rate.
func newBar(w io.Writer, steps int) *progressbar.ProgressBar {
	max := int64(steps)
	if steps <= 0 {
		max = -1 // a spinner: the end is not known
	}
	return progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("train"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(progressThrottle),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetRenderBlankState(true),
	)
}

// Update reports that step steps are done, with the recent loss, the
// throughput and any extra text (such as "scale 32768" or "eval 1.52").
func (p *Progress) Update(step int, loss float64, samplesPerSec float64, extra string) {
	if p == nil || p.rank != 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		desc := fmt.Sprintf("loss %.4f | %.0f samples/s", loss, samplesPerSec)
		if p.first > 0 { // the bar counts the steps since the resume: say where the run is
			desc = fmt.Sprintf("step %d/%d | %s", step, p.total, desc)
		}
		if extra != "" {
			desc += " | " + extra
		}
		p.bar.Describe(desc)
		p.bar.Set(step - p.first)
		return
	}
	kv := []any{"step", step}
	if p.total > 0 {
		kv = append(kv, "of", p.total)
	}
	kv = append(kv, "loss", fmt.Sprintf("%.4f", loss), "samples_per_sec", fmt.Sprintf("%.1f", samplesPerSec))
	if eta, ok := p.eta(step); ok {
		kv = append(kv, "eta", eta.Round(time.Second).String())
	}
	if extra != "" {
		kv = append(kv, "extra", extra)
	}
	p.log.Info("train", kv...)
}

// Start says the training loop starts now, at step first (a resumed run's checkpoint, else 0):
// the ETA is the rate of the steps this process trained since, not counting the setup (model,
// data, rendezvous) nor the steps a checkpoint brought.
func (p *Progress) Start(first int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start, p.first = time.Now(), first
	if p.bar != nil && first > 0 && p.total > first {
		p.bar = newBar(p.out, p.total-first) // the old one, never drawn past 0, is dropped
	}
}

// eta extrapolates the time left from the mean step time of the steps trained since Start.
func (p *Progress) eta(step int) (time.Duration, bool) {
	if p.total <= 0 || step <= p.first || step > p.total {
		return 0, false
	}
	el := time.Since(p.start)
	return time.Duration(float64(el) / float64(step-p.first) * float64(p.total-step)), true
}

// Log writes one message with key-value pairs (slog style), above the bar
// when one is drawn. Every rank logs.
func (p *Progress) Log(msg string, kv ...any) {
	if p == nil {
		slog.Info(msg, kv...)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Clear()
	}
	p.log.Info(msg, kv...)
}

// Finish completes the bar (a newline after it, so later output starts on
// its own line). Safe to call more than once.
func (p *Progress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		switch {
		case p.bar.IsFinished():
		case p.total > 0 && p.bar.State().CurrentNum >= int64(p.total):
			p.bar.Finish()
		default:
			p.bar.Exit() // stopped early: keep the bar where it is, not at 100%
		}
		fmt.Fprintln(p.out)
		p.bar = nil
	}
}

var _ Observer = (*Progress)(nil)

// Step updates the bar, or writes a plain line, for a step that closes a window; the run's last
// step finishes the bar (Observer).
func (p *Progress) Step(r StepRecord) {
	if r.Window != nil {
		p.Update(r.Step, r.Loss, r.SamplesPerSec(), fmt.Sprintf("scale %.0f", r.LossScale))
	}
	if r.Last {
		p.Finish()
	}
}

// Eval logs an evaluation: the loss, and the accuracy for a classifier (Observer).
func (p *Progress) Eval(r EvalRecord) {
	if r.Accuracy == nil { // a language model: loss in nats per token, no accuracy
		p.Log("eval", "step", r.Step, "loss", fmt.Sprintf("%.4f", r.Loss))
		return
	}
	p.Log("eval", "step", r.Step, "loss", fmt.Sprintf("%.4f", r.Loss), "accuracy", fmt.Sprintf("%.4f", *r.Accuracy))
}

// Summary does nothing: ddptrain prints the summary itself (Observer).
func (p *Progress) Summary(SummaryMetrics) {}
