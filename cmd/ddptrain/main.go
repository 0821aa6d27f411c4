// Command ddptrain trains one worker process: alone, or as one rank of a data-parallel job
// started by ddplaunch (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DDP_TOKEN).
//
//	ddptrain --config configs/mnist-mlp.yaml [--set train.lr=0.003 ...] [--metrics FILE] [--trace FILE]
//	ddptrain sample --checkpoint DIR --prompt TEXT [--max-new-tokens N ...]   (sample.go)
//	ddptrain eval --checkpoint DIR [--config FILE] [--set ...] [--json]   (eval.go)
//	ddptrain export --checkpoint DIR --format hf --out OUT     (subcommands: subcommands.go)
//
// Exit status: 0 when the run finished; 1 when it failed; 2 for a usage or config error (nothing
// was trained); 3 for the failure DDP_FAIL_AT_STEP plants (tests of restarts: see main.go's
// testHooks), so a test can tell it from a real one.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/worker"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/observe"
)

// Exit statuses.
const (
	exitFailed        = 1
	exitUsage         = 2 // also a config that does not load
	exitInjectedFault = 3 // DDP_FAIL_AT_STEP
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
	fs.BoolVar(&opt.CheckLeaks, "check-leaks", false, "fail when device memory is not back at its baseline after a step")
	fs.StringVar(&opt.MemoryPlot, "memory-plot", "", "draw device memory over one training step, by layer, into this PNG")
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
		if rank, _ := strconv.Atoi(os.Getenv("RANK")); rank == 0 {
			fmt.Println(fin.Error())
		}
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		if errors.Is(err, errInjectedFault) {
			return exitInjectedFault
		}
		return exitFailed
	}
	if res.Rank == 0 {
		fmt.Println(observe.FormatSummary(res))
	}
	return 0
}

// errInjectedFault is the failure DDP_FAIL_AT_STEP plants.
var errInjectedFault = errors.New("failing on purpose (DDP_FAIL_AT_STEP)")

// testHooks turns the fault-injection variables of the tests into the trainer's hooks:
//
//	DDP_FAIL_AT_STEP=N        the first attempt (DDP_RESTART_COUNT 0) fails just before step N:
//	                          the run stops, closes what it opened, and ddptrain exits 3
//	DDP_INJECT_INF_STEP=N     rank DDP_INJECT_INF_RANK (default 0) puts +Inf into a gradient at
//	                          step N (the loss scaler must skip the step on every rank)
//
// Unset, they leave the hooks nil.
func testHooks(opt *worker.Options) {
	if n := envInt("DDP_FAIL_AT_STEP"); n > 0 && envInt("DDP_RESTART_COUNT") == 0 {
		opt.FaultHook = func(step int) error {
			if step == n {
				return errInjectedFault
			}
			return nil
		}
	}
	if n := envInt("DDP_INJECT_INF_STEP"); n > 0 {
		rank, at := envInt("RANK"), envInt("DDP_INJECT_INF_RANK")
		opt.InjectInf = func(step int) bool { return step == n && rank == at }
	}
}

// envInt reads an integer environment variable; unset or malformed is 0.
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}
