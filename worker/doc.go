// Package worker is one training process of a goddp job: alone, or one rank under ddplaunch.
// cmd/ddptrain is its command line; this package is the process, from the config to the trainer:
// setup, the loop, evaluation. Persistence is package worker/checkpoint, observation (metrics,
// Prometheus, progress, memory report and plot, the trace) package worker/observe; the config
// and the data are worker/config and worker/data.
//
// A run, in the order it happens:
//
//  1. The config: LoadConfig is config.Load (package worker/config: schema, YAML, --set,
//     validation, batch arithmetic, hash) plus data.path's default on this host (package
//     worker/data finds it). The environment the launcher sets, RANK, WORLD_SIZE, ..., is read
//     in one place, EnvFromOS (env.go).
//  2. Setup, New (trainer.go), in named steps: readEnv; joinGroup, the process group (package
//     allreduce) and the batch; buildModel, the device (build.go; the CUDA one in
//     device_cuda.go), the model's spec (ModelSpec, derived once and kept: t.spec), the data
//     sets, the model (model.New of the spec), optimizer and loss scaler (package model);
//     fitMemory, micro_batch: auto (autobatch.go) or the memory budget; startEngine, the DDP
//     engine (package ddp, over ddp.channels groups: channels.go) with the trace as its
//     ddp.Tracer; resumeOrInit, the resume from the newest checkpoint any rank has or
//     --resume-from's (checkpoint.Sync, checkpoint.State.Restore: a checkpoint of another
//     trajectory is refused naming each key that differs; a directory whose every checkpoint is
//     broken is an error), or else model.init_from's weights (checkpoint.LoadInitFrom), and the
//     broadcast that makes the replicas identical; openLoader, the data loader (pinned host
//     buffers on a GPU: pinned.go) and the schedule. A run whose checkpoint is at its last step
//     stops here (FinishedError, with that run's summary). openOutputs: the observers
//     (observe.MetricsWriter, observe.Prometheus, observe.Progress, fanned out by
//     observe.Observers).
//  3. The loop, (*Trainer).Run (loop.go): settings printed once, then each step between the
//     TRAINING STEP BEGIN/END markers (microStep per micro-batch, backward with the all-reduce
//     overlapped; waitAllReduce; update: the loss scaler's agreement, norm, the optimizer at the
//     step's lr, the loss read back), then the diagnostics: the step's record to the observers,
//     replica checks, evaluation (eval.go: evaluate) and checkpoints (checkpoint.State.Save, in
//     the background); at the end (finish) a last evaluation, checkpoint and the summary.
//     --memory-report, --memory-plot and --check-leaks are package observe's.
//  4. Close (trainer.go) releases what New opened, in reverse order: also after a failure, and
//     when New itself fails partway. Run is the three together.
//
// The model's kind: ModelSpec (build.go) is the one place that reads model.kind, translating
// the config into a model.Spec. Past it, the loop, evaluation, the inputs and the sampler ask the
// model (or its spec) what they need: Input (token ids of width Tokens, or Features floats),
// TargetsPerSample (a GPT's sample has one per position) and Classifier (accuracy and
// predictions, or tokens/s): never the kind. kind_test.go fails on a comparison of the kind
// anywhere else; the config's validation, per kind, is worker/config's.
//
// EvaluateCheckpoint (eval.go, ddptrain eval) scores a checkpoint on the eval split without
// training, with the config the checkpoint records (ConfigFromCheckpoint) or one given.
//
// worker imports worker/checkpoint, worker/observe, worker/config, worker/data, ddp, allreduce
// and model; none of those imports worker. Nothing here exits the process: errors are returned,
// and cmd/ddptrain maps them to exit statuses. The tests' fault injection (DDP_FAIL_AT_STEP,
// DDP_INJECT_INF_*) reaches the loop only through Options.FaultHook and Options.InjectInf, which
// cmd/ddptrain sets.
package worker
