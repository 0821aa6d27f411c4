// Package observe is what a training run tells the world while it runs: the JSON-lines metrics
// file (--metrics), Prometheus (metrics.listen, --metrics-port), the progress bar or lines, the
// memory report and plot (--memory-report, --memory-plot, --check-leaks) and the trace (--trace).
//
// The loop reports through one small interface, Observer (observer.go): Step after every
// optimizer step, Eval after each evaluation, Summary at the end, all from the training
// goroutine. MetricsWriter (metrics.go), Prometheus (prom.go) and Progress (progress.go)
// implement it; Observers fans one call out to all of them. The trace is a ddp.Tracer instead
// (trace.go): the DDP engine adds its all-reduce spans to the loop's.
//
//	observer.go  Observer, StepRecord, EvalRecord, Window, Observers (the fan-out)
//	metrics.go   the JSON lines (StepMetrics, EvalMetrics, SummaryMetrics), MetricsWriter,
//	             ReadMetrics, RankPath (rank r's copy of a per-rank file), FormatSummary
//	prom.go      Prometheus: one registry per rank, served over HTTP
//	progress.go  Progress: a bar on a terminal, plain lines elsewhere
//	memory.go    MemoryReport, CheckLeaks
//	memplot.go   MemTimeline: device memory over one step, drawn as a PNG
//	trace.go     Trace: spans as Chrome trace events, a ddp.Tracer
//
// It may import model (and model/tensor) and ddp (for the Tracer interface); never worker (the trainer imports it) nor worker/checkpoint. It reads no
// environment variable: the trainer passes in what the environment says (rank, LOCAL_RANK,
// restarts, DDP_PROGRESS_FD).
package observe
