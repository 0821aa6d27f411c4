// Package worker is one training process of a goddp job: alone, or one rank under ddplaunch.
// cmd/ddptrain is its command line; this package is the trainer.
//
// A run, in the order it happens:
//
//  1. The config: LoadConfig is config.Load (package worker/config: schema, YAML, --set,
//     validation, batch arithmetic, hash) plus data.path's default on this host (package
//     worker/data finds it). The environment the launcher sets, RANK, WORLD_SIZE, ..., is read
//     in one place, EnvFromOS (env.go).
//  2. Setup, New (trainer.go): the process group (package allreduce), the device (build.go;
//     the CUDA one in device_cuda.go), the data sets and their loader (package worker/data, with
//     pinned host buffers on a GPU: pinned.go), the model, optimizer and loss scaler (package
//     model), the batch (micro_batch: auto searched in autobatch.go), the DDP engine (package
//     ddp, over ddp.channels groups: channels.go), the resume from the newest checkpoint any rank
//     has or --resume-from's (checkpoint.go, ckpt_sync.go; state.go compares the checkpoint's
//     trajectory config with this run's and names each key that differs; a directory whose
//     every checkpoint is broken is an error), or else model.init_from's weights (initfrom.go),
//     and the broadcast that makes the replicas identical. A run whose checkpoint is at its last
//     step stops here (FinishedError, with that run's summary). Then the metrics file
//     (metrics.go), the Prometheus server (prom.go: metrics.listen, --metrics-port) and the progress bar
//     (progress.go).
//  3. The loop, (*Trainer).Run (loop.go): settings printed once, then each step between the
//     TRAINING STEP BEGIN/END markers (micro-batches, backward with the all-reduce overlapped,
//     the loss scaler's agreement, the optimizer), then logging, replica checks, evaluation and
//     checkpoints; at the end a last evaluation, checkpoint and the summary. --memory-report,
//     --memory-plot and --check-leaks are memory.go and memplot.go.
//  4. Close (trainer.go) releases what New opened, in reverse order: also after a failure, and
//     when New itself fails partway. Run is the three together.
//
// EvaluateCheckpoint (eval.go, ddptrain eval) scores a checkpoint on the eval split without
// training, with the config the checkpoint records (ConfigFromCheckpoint) or one given.
//
// Checkpoints carry their model's spec (model.Spec: config.json and the weights' __metadata__),
// so export.go turns one into Hugging Face GPT-2's layout (`ddptrain export`) with no run config.
//
// Nothing here exits the process: errors are returned, and cmd/ddptrain maps them to exit
// statuses. The tests' fault injection (DDP_FAIL_AT_STEP, DDP_INJECT_INF_*) reaches the loop
// only through Options.FaultHook and Options.InjectInf, which cmd/ddptrain sets.
package worker
