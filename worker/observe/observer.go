package observe

// observer.go: what a training run reports, and to whom. The loop builds one record per step,
// one per evaluation and one summary, and hands each to one Observer: Observers, the fan-out to
// the JSON-lines metrics file (MetricsWriter), Prometheus (Prometheus) and the progress display
// (Progress).

import (
	"time"

	"github.com/goddp/goddp/model/tensor"
)

// Observer is told what a training run did. The trainer calls it from its one training
// goroutine, never concurrently, in the run's order: Step after every optimizer step (after
// the step's all-reduce and update, before that step's evaluation and checkpoint), Eval after each
// evaluation during training, Summary once when the run finishes (not on a failure). A method
// must not block for long (it runs inside the training loop) and reports no error: an observer
// that can fail keeps its first error for its own Close. Records are values; an observer may
// keep them.
type Observer interface {
	Step(StepRecord)
	Eval(EvalRecord)
	Summary(SummaryMetrics)
}

// StepRecord is one optimizer step, as the training loop saw it.
type StepRecord struct {
	Step  int  // optimizer steps done in the run, this one included (a resumed run starts at its checkpoint's)
	Epoch int  // the epoch the run is in after this step
	Last  bool // the run's last step

	Seconds         float64 // the step's wall time
	Samples         int     // samples per optimizer step over all ranks (the global batch)
	TokensPerSample int     // a language model's context; 0 for a classifier
	Loss            float64 // the step's loss (mean over its micro-batches)
	LR              float32 // the learning rate the optimizer used
	LossScale       float64 // the loss scaler's scale after the step (1 under fp32)
	// GradNorm is the global L2 norm of the step's gradients, unscaled and before clipping: with
	// train.grad_clip every step, else measured only on steps with a Window when metrics are
	// asked for; NaN when not measured or when the step was skipped.
	GradNorm     float64
	Skipped      bool // this step was skipped: a gradient overflowed (inf/NaN)
	SkippedTotal int  // steps skipped so far in the run
	Mem          tensor.MemStats

	// Cumulative since the process started: the DDP engine's all-reduce time and the share of it
	// hidden under backward (ddp.Engine.CommStats), and the bytes on the wire over every group.
	CommSeconds, CommHiddenFraction float64
	WireSent, WireRecv              int64

	// Window is the steps since the last report (every train.log_every steps, and the last step),
	// on the steps that close one; nil on the others.
	Window *Window
}

// Window is the stretch of steps a metrics line and a progress update report on.
type Window struct {
	Steps       int           // steps in it
	Seconds     float64       // its wall time
	Data        time.Duration // of which the loop spent waiting for batches and issuing their uploads
	CommSeconds float64       // all-reduce time in it (world > 1)
}

// SamplesPerSec is the job's throughput over the window (the global batch × steps / seconds).
func (r StepRecord) SamplesPerSec() float64 {
	return float64(r.Window.Steps*r.Samples) / r.Window.Seconds
}

// EvalRecord is one evaluation during training.
type EvalRecord struct {
	Step, Epoch int
	Loss        float64  // nats per sample (per token for a language model)
	Accuracy    *float64 // classifiers only
	Samples     int      // eval samples over all ranks (a language model's: sequences)
	Seconds     float64  // wall time of the evaluation
}

// Observers is the fan-out: each call goes to every observer in order. Nil entries are skipped,
// so optional observers may be listed as they are.
type Observers []Observer

var _ Observer = Observers(nil)

// Step tells every observer.
func (os Observers) Step(r StepRecord) {
	for _, o := range os {
		if o != nil {
			o.Step(r)
		}
	}
}

// Eval tells every observer.
func (os Observers) Eval(r EvalRecord) {
	for _, o := range os {
		if o != nil {
			o.Eval(r)
		}
	}
}

// Summary tells every observer.
func (os Observers) Summary(s SummaryMetrics) {
	for _, o := range os {
		if o != nil {
			o.Summary(s)
		}
	}
}
