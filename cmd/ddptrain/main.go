// Command ddptrain trains one worker process: alone, or as one rank of a data-parallel job
// started by ddplaunch (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DDP_TOKEN).
//
//	ddptrain --config configs/mnist-mlp.yaml [--set train.lr=0.003 ...] [--metrics FILE] [--trace FILE]
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/goddp/goddp/worker"
)

func main() {
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
	keys := fs.Bool("keys", false, "list every config key and exit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ddptrain --config FILE [--set key=value ...] [flags]\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		os.Exit(2)
	}
	if *keys {
		for _, k := range worker.Keys() {
			fmt.Println(k)
		}
		return
	}
	if *configPath == "" {
		fs.Usage()
		os.Exit(2)
	}
	opt.FailAtStep = envInt("DDP_FAIL_AT_STEP")
	opt.InjectInfStep = envInt("DDP_INJECT_INF_STEP")
	opt.InjectInfRank = envInt("DDP_INJECT_INF_RANK")
	opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	cfg, err := worker.LoadConfig(*configPath, *sets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := worker.Run(ctx, cfg, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddptrain:", err)
		os.Exit(1)
	}
	if res.Rank == 0 {
		fmt.Println(worker.FormatSummary(res))
	}
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}
