// Command ddptrain trains one worker process: alone, or as one rank of a data-parallel job
// started by ddplaunch (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DDP_TOKEN).
//
//	ddptrain --config configs/mnist-mlp.yaml [--set train.lr=0.003 ...] [--metrics FILE] [--trace FILE]
//	ddptrain sample --checkpoint DIR --prompt TEXT [--max-new-tokens N ...]   (sample.go)
//	ddptrain eval --checkpoint DIR [--config FILE] [--set ...] [--json]   (eval.go)
//	ddptrain export --checkpoint DIR --format hf --out OUT     (subcommands: subcommands.go)
//
// Exit status: 0 when the run finished; 1 when it failed; 2 for a usage or config error (nothing
// was trained); 3 for the failure DDP_FAIL_AT_STEP plants (tests of restarts, in a binary built
// with -tags ddptesthooks only: testhooks_env.go), so a test can tell it from a real one; 4 when
// it failed because another rank did (a collective or link naming a peer, a rendezvous that lost
// its master: allreduce.FailedByPeer) or its failure is the cancellation a stop signal made (a rank
// whose own error came as the signal arrived exits 1): ddplaunch reads 4 as a follow-on
// (launcher.ExitFollowOn) and blames another rank first; 5 when, as rank 0, it could not listen on
// MASTER_ADDR:MASTER_PORT because another process holds it: ddplaunch, when it drew the port,
// starts the job again on another one without counting a restart (launcher.ExitMasterPortTaken).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/observe"
)

// Exit statuses.
const (
	exitFailed        = 1
	exitUsage         = 2 // also a config that does not load
	exitInjectedFault = 3 // DDP_FAIL_AT_STEP (-tags ddptesthooks)
	exitFollowOn      = 4 // another rank's failure, or a stop signal (launcher.ExitFollowOn)
	exitMasterPort    = 5 // rank 0: MASTER_ADDR:MASTER_PORT taken by another process (launcher.ExitMasterPortTaken)
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if code, ok := runSubcommand(args); ok {
		return code
	}
	fs := pflag.NewFlagSet("ddptrain", pflag.ContinueOnError)
	fs.SortFlags = false
	configPath := fs.String("config", "", "run configuration (YAML), e.g. configs/mnist-mlp.yaml")
	sets := fs.StringArray("set", nil, "override a config key: --set train.lr=0.003 (repeatable)")
	var opt worker.Options
	fs.StringVar(&opt.Device, "device", "auto", "device: auto (a GPU when this build has CUDA and one is visible, else cpu), cpu, or cuda (make cuda)")
	fs.StringVar(&opt.MetricsPath, "metrics", "", "write JSON-lines metrics to this file")
	fs.StringVar(&opt.TracePath, "trace", "", "write a Chrome trace-event timeline (Perfetto) to this file")
	fs.BoolVar(&opt.MemoryReport, "memory-report", false, "print a memory breakdown after the first steps")
	fs.BoolVar(&opt.CheckLeaks, "check-leaks", false, "fail when device memory at a step's end is above the end of the run's first step")
	fs.StringVar(&opt.MemoryPlot, "memory-plot", "", "draw device memory over one training step, by layer, into this PNG")
	fs.IntVar(&opt.ProfileStep, "profile-step", 0, "time every kernel of step N with device events and print the table per kernel on stderr (cuda)")
	fs.IntVar(&opt.ProfileSteps, "profile-steps", 1, "how many steps from --profile-step the profile covers (2 or more: its gaps between kernels include the time between steps)")
	fs.StringVar(&opt.ResumeFrom, "resume-from", "", "resume from this checkpoint (a step directory) instead of the newest in checkpoint.dir")
	metricsPort := fs.Int("metrics-port", 0, "serve Prometheus metrics on this port (rank r of a host: port + LOCAL_RANK); metrics.listen in the config sets host:port")
	keys := fs.Bool("keys", false, "list every config key and exit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ddptrain --config FILE [--set key=value ...] [flags]\n%s\n%s", subcommandUsage(), fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		return exitUsage
	}
	if *keys {
		for _, k := range config.Keys() {
			fmt.Println(k)
		}
		return 0
	}
	if *configPath == "" {
		fs.Usage()
		return exitUsage
	}
	if *metricsPort != 0 {
		opt.MetricsListen = fmt.Sprintf(":%d", *metricsPort)
	}
	testHooks(&opt)
	opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	cfg, err := worker.LoadConfig(*configPath, *sets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := worker.Run(ctx, cfg, opt)
	if fin := (*worker.FinishedError)(nil); errors.As(err, &fin) {
		if envInt("RANK") == 0 {
			fmt.Println(fin.Error())
		}
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		if injectedFault(err) {
			return exitInjectedFault
		}
		if mp := (*worker.MasterPortTakenError)(nil); errors.As(err, &mp) {
			return exitMasterPort
		}
		// A stop signal counts only when the failure is the cancellation itself: a rank whose own
		// error (bad data, say) came as the launcher's SIGTERM arrived is a root cause, not a
		// follow-on (with ctx.Err() alone, both ranks of the empty-data case could exit 4).
		if allreduce.FailedByPeer(err) || errors.Is(err, context.Canceled) {
			return exitFollowOn
		}
		return exitFailed
	}
	if res.Rank == 0 {
		fmt.Println(observe.FormatSummary(res))
	}
	return 0
}
