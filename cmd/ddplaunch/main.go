// Command ddplaunch starts and supervises the workers of a goddp job on this host, the way torchrun
// does. See docs/launcher.md and package launcher.
//
//	ddplaunch --nproc-per-node N|gpu|cpu|auto [flags] PROGRAM [ARGS...]
//	ddplaunch --nproc-per-node N --config configs/X.yaml [--set k=v ...] [-- DDPTRAIN-FLAGS...]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/goddp/goddp/launcher"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// trainerName is the built-in trainer the --config form runs.
const trainerName = "ddptrain"

const usageHead = `ddplaunch starts one worker process per GPU (or CPU slot) on this host and supervises them.

usage:
  ddplaunch --nproc-per-node N|gpu|cpu|auto [flags] PROGRAM [ARGS...]
  ddplaunch --nproc-per-node N --config configs/X.yaml [--set key=value ...] [-- DDPTRAIN-FLAGS...]

Flags stop at PROGRAM: everything after it belongs to the program. Each worker gets RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT, DDP_TOKEN,
DDP_RESTART_COUNT and DDP_MAX_RESTARTS (see docs/launcher.md).

flags:
`

// cli is the parsed command line.
type cli struct {
	opts      launcher.Options
	nproc     string
	nnodes    string
	nodeRank  int
	config    string
	sets      []string
	help      bool
	usageText string
}

// parseArgs parses args (without the program name). findTrainer locates ddptrain for --config.
func parseArgs(args []string, findTrainer func() (string, error)) (*cli, error) {
	c := &cli{}
	fs := pflag.NewFlagSet("ddplaunch", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVar(&c.nproc, "nproc-per-node", "1", "workers on this host: a number, gpu (one per visible GPU), cpu (one per CPU), or auto (gpu if any GPU is visible, else cpu, as torchrun)")
	fs.StringVar(&c.opts.MasterAddr, "master-addr", launcher.DefaultMasterAddr, "MASTER_ADDR: the address rank 0 listens on")
	fs.IntVar(&c.opts.MasterPort, "master-port", 0, "MASTER_PORT; 0 = a free port, drawn again for each restart")
	fs.IntVar(&c.opts.MaxRestarts, "max-restarts", 0, "restart every worker up to this many times after a worker fails")
	fs.StringVar(&c.opts.LogDir, "log-dir", "", "also write each rank's output to DIR/rank-N.log")
	fs.DurationVar(&c.opts.Grace, "grace", 10*time.Second, "time workers have between SIGTERM and SIGKILL when stopped")
	fs.StringVar(&c.config, "config", "", "run the built-in trainer ("+trainerName+") with this YAML config")
	fs.StringArrayVar(&c.sets, "set", nil, "with --config: override a config key, key=value (repeatable)")
	fs.StringVar(&c.nnodes, "nnodes", "1", "hosts in the job (multi-host is not implemented yet: 1 only)")
	fs.IntVar(&c.nodeRank, "node-rank", 0, "this host's rank (multi-host is not implemented yet: 0 only)")
	c.usageText = usageHead + fs.FlagUsages()

	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		c.help = true
		return c, nil
	} else if err != nil {
		if c.config != "" && strings.HasPrefix(err.Error(), "unknown flag") {
			err = fmt.Errorf("%w (flags for %s go after --)", err, trainerName)
		}
		return nil, err
	}
	if c.nnodes != "1" && c.nnodes != "1:1" {
		return nil, fmt.Errorf("--nnodes %s: multi-host jobs are not implemented yet; only --nnodes 1", c.nnodes)
	}
	if c.nodeRank != 0 {
		return nil, fmt.Errorf("--node-rank %d: with one host the node rank is 0", c.nodeRank)
	}
	if c.opts.MaxRestarts < 0 {
		return nil, fmt.Errorf("--max-restarts %d: want 0 or more", c.opts.MaxRestarts)
	}
	if c.opts.MasterPort < 0 || c.opts.MasterPort > 65535 {
		return nil, fmt.Errorf("--master-port %d: want 0..65535", c.opts.MasterPort)
	}
	rest := fs.Args()
	if c.config == "" {
		if len(c.sets) > 0 {
			return nil, errors.New("--set needs --config")
		}
		if len(rest) == 0 {
			return nil, errors.New("no PROGRAM to run (or --config for the built-in trainer)")
		}
		c.opts.Program, c.opts.Args = rest[0], rest[1:]
		return c, nil
	}
	if len(rest) > 0 && fs.ArgsLenAtDash() != 0 {
		return nil, fmt.Errorf("--config runs %s: give either --config or PROGRAM %q, and put %s flags after --", trainerName, rest[0], trainerName)
	}
	prog, err := findTrainer()
	if err != nil {
		return nil, err
	}
	c.opts.Program = prog
	c.opts.Args = append([]string{"--config", c.config}, setArgs(c.sets)...)
	c.opts.Args = append(c.opts.Args, rest...)
	return c, nil
}

func setArgs(sets []string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, "--set", s)
	}
	return out
}

// findTrainer looks for ddptrain next to this executable, then on $PATH.
func findTrainer() (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), trainerName)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
			tried = append(tried, "next to ddplaunch ("+filepath.Dir(exe)+")")
		}
	}
	if p, err := exec.LookPath(trainerName); err == nil {
		return p, nil
	}
	tried = append(tried, "on $PATH")
	return "", fmt.Errorf("--config runs the trainer %s, but it is neither %s; build it with `make build` (bin/) or `go build -o DIR ./cmd/%s`",
		trainerName, strings.Join(tried, " nor "), trainerName)
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	c, err := parseArgs(args, findTrainer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\nrun ddplaunch --help for usage\n", err)
		return 2
	}
	if c.help {
		fmt.Fprint(os.Stdout, c.usageText)
		return 0
	}
	gpus := launcher.DefaultGPUProbe().Count()
	nproc, err := launcher.ResolveNProc(c.nproc, gpus)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err)
		return 2
	}
	o := c.opts
	o.NProcPerNode = nproc
	o.VisibleGPUs = gpus
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		o.VisibleDevices = launcher.ParseVisibleDevices(v)
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = os.Stderr
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	o.Signals = sigs

	err = launcher.Run(context.Background(), o)
	var we *launcher.WorkerError
	var se *launcher.SignalError
	if err != nil && !errors.As(err, &we) && !errors.As(err, &se) {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err) // the others are reported by Run
	}
	return launcher.ExitCode(err)
}
