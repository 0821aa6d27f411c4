package main

// eval.go: `ddptrain eval`, scoring a checkpoint on the eval split without training.
//
//	ddptrain eval --checkpoint DIR [--config FILE] [--set key=value ...] [--json] [--device cpu]
//
// DIR is a checkpoint (a step directory) or a checkpoint.dir (its newest). Without --config the
// run's config is the one the checkpoint records (its trajectory config and data.path, the other keys at their
// defaults); --set overrides either (train.micro_batch, train.eval_batches, data.path, ...).
// It prints loss, accuracy for classifiers, samples and seconds; --json prints them as one JSON
// object. Exit status 0, 1 when the evaluation failed, 2 for a usage or config error.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/checkpoint"
)

func init() {
	register("eval", subcommand{summary: "score a checkpoint on the eval split without training", run: func(args []string) int { return runEval(args, os.Stdout, os.Stderr) }})
}

func runEval(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("ddptrain eval", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stderr)
	ckpt := fs.String("checkpoint", "", "the checkpoint: a step directory, or a checkpoint.dir (its newest)")
	configPath := fs.String("config", "", "run configuration (YAML); default: the one the checkpoint records")
	sets := fs.StringArray("set", nil, "override a config key: --set train.eval_batches=20 (repeatable)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	var opt worker.Options
	fs.StringVar(&opt.Device, "device", "auto", "device: auto, cpu or cuda")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ddptrain eval --checkpoint DIR [--config FILE] [--set key=value ...] [--json]\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "ddptrain eval:", err)
		return exitUsage
	}
	if *ckpt == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	opt.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	path, err := checkpoint.Resolve(*ckpt)
	if err != nil {
		fmt.Fprintln(stderr, "ddptrain eval:", err)
		return exitUsage
	}
	var cfg *worker.Config
	if *configPath != "" {
		cfg, err = worker.LoadConfig(*configPath, *sets)
	} else {
		cfg, err = worker.ConfigFromCheckpoint(path, *sets)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ddptrain eval:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := worker.EvaluateCheckpoint(ctx, path, cfg, opt)
	if err != nil {
		fmt.Fprintln(stderr, "ddptrain eval:", err)
		return exitFailed
	}
	if *asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, r)
	}
	return 0
}
