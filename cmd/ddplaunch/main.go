// Command ddplaunch starts and supervises the workers of a goddp job on this host, the way torchrun
// does. See docs/launcher.md and package launcher.
//
//	ddplaunch --nproc-per-node N|gpu|cpu|auto [flags] PROGRAM [ARGS...]
//	ddplaunch --nproc-per-node N --config configs/X.yaml [--set k=v ...] [-- DDPTRAIN-FLAGS...]
//
// With --config, the config is loaded and validated here (package worker/config, which links
// none of the trainer) before any worker starts: a bad key or value is printed once, by the
// launcher, and it exits 2, the status of a usage error, rather than every worker printing it
// and the launcher passing on a worker's status. Exit statuses (docs/launcher.md): 0 when every
// worker exited 0; the failed worker's status; 128+signal; 2 for a usage or config error; 1 for
// any other launcher error.
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
	"strconv"
	"strings"
	"time"

	"github.com/goddp/goddp/launcher"
	"github.com/goddp/goddp/worker/config"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// trainerName is the built-in trainer the --config form runs.
const trainerName = "ddptrain"

const usageHead = `ddplaunch starts one worker process per GPU (or CPU slot) on this host and supervises them.

usage:
  ddplaunch --nproc-per-node N|gpu|cpu|auto [flags] PROGRAM [ARGS...]
  ddplaunch --nproc-per-node N --config configs/X.yaml [--set key=value ...] [-- DDPTRAIN-FLAGS...]
  ddplaunch --nnodes M|MIN:MAX --join HOST[:7946],... [--cluster-key-file F] ... (one per host; docs/multihost.md)
  ddplaunch --nnodes N --node-rank R --master-addr A --master-port P ... (one per host: torchrun's static rendezvous)

Flags stop at PROGRAM: everything after it belongs to the program. A PROGRAM ending in .py, and
every -m MODULE, runs with python3 -u (or $PYTHON_EXEC), as torchrun runs it; --no-python runs it
itself. torchrun's flags work in both spellings (--nproc_per_node, --nproc-per-node), and so do
ddplaunch's own. Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK,
MASTER_ADDR, MASTER_PORT, DDP_TOKEN, DDP_RESTART_COUNT, DDP_MAX_RESTARTS and torchrun's
TORCHELASTIC_*, GROUP_*, ROLE_* and OMP_NUM_THREADS (see docs/launcher.md).

flags:
`

const usageExit = `
exit status:
  0        every worker exited 0
  N        a worker failed: the exit code of the root failure (the worker whose failure began first,
           not its peers' follow-on errors); 128+N when signal N killed it (137: SIGKILL)
  128+N    ddplaunch was stopped by signal N and stopped the workers (130: SIGINT, 143: SIGTERM)
  2        usage or configuration error (a bad flag value, too many workers, split-brain risk):
           no worker was started
  126, 127 PROGRAM is not executable, or not found (as a shell says)
  1        any other launcher failure: rendezvous timeout, a host lost with no restart left, a
           restart refused because this side is not a majority of the previous hosts
  A worker's own code passes through, so 1 and 2 can come from a worker too; stderr says which.
`

// cli is the parsed command line.
type cli struct {
	opts      launcher.Options
	nproc     string
	nnodes    string
	nodeRank  string
	multi     multiFlags
	config    string
	sets      []string
	loaded    *config.Config // --config, loaded and validated by run
	tr        torchrunFlags
	signals   []os.Signal // --signals-to-handle
	viaPython bool        // Program is the Python interpreter running the user's PROGRAM
	script    string      // PROGRAM as given (a script or module when viaPython)
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
	fs.SetNormalizeFunc(underscoreToDash)
	fs.StringVar(&c.nproc, "nproc-per-node", "1", "workers on this host: a number, gpu (one per visible GPU), cpu (one per CPU), or auto (gpu if any GPU is visible, else cpu, as torchrun)")
	fs.StringVar(&c.opts.MasterAddr, "master-addr", launcher.DefaultMasterAddr, "MASTER_ADDR: the address rank 0 listens on")
	fs.IntVar(&c.opts.MasterPort, "master-port", 0, "MASTER_PORT; 0 = a free port, drawn again for each restart (several hosts, static: 29500, as torchrun)")
	fs.IntVar(&c.opts.MaxRestarts, "max-restarts", 0, "restart every worker up to this many times after a worker fails")
	fs.StringVar(&c.opts.LogDir, "log-dir", "", "also write each rank's output to DIR/rank-N.log and, as torchrun, DIR/RUN_ID_x/attempt_N/LOCAL_RANK/{stdout,stderr}.log")
	fs.DurationVar(&c.opts.Grace, "grace", 10*time.Second, "time workers have between SIGTERM and SIGKILL when stopped")
	fs.BoolVar(&c.opts.Oversubscribe, "oversubscribe", false, fmt.Sprintf("start more than %d workers per CPU (refused otherwise)", launcher.MaxWorkersPerCPU))
	fs.StringVar(&c.config, "config", "", "run the built-in trainer ("+trainerName+") with this YAML config")
	fs.StringArrayVar(&c.sets, "set", nil, "with --config: override a config key, key=value (repeatable)")
	fs.StringVar(&c.nnodes, "nnodes", "1", "hosts in the job: M, or MIN:MAX for an elastic job (default $SLURM_NNODES)")
	fs.StringVar(&c.nodeRank, "node-rank", "auto", "this host's rank, or auto (a stable order agreed by all hosts; the static rendezvous needs a number) (default $SLURM_NODEID)")
	m := &c.multi
	fs.BoolVar(&m.allowMinority, "allow-minority", false, "multi-host: allow --nnodes MIN ≤ MAX/2 and restarts without a majority of the previous hosts (risks a split brain after a partition)")
	fs.StringSliceVar(&m.join, "join", nil, "multi-host: gossip address(es) of peers, host[:7946],...; a DNS name may resolve to several (default: first host of $SLURM_JOB_NODELIST)")
	fs.StringVar(&m.rdzvID, "rdzv-id", "goddp", "job id, TORCHELASTIC_RUN_ID; multi-host: hosts of other jobs are refused (default $SLURM_JOB_ID)")
	fs.StringVar(&m.bind, "bind", "0.0.0.0:7946", "multi-host: gossip listen address ADDR:PORT")
	fs.StringVar(&m.advertise, "advertise-addr", "", "multi-host: IP the other hosts reach this one at (default: the bind IP, else the route to --join)")
	fs.StringVar(&m.keyFile, "cluster-key-file", "", "multi-host: file with the cluster key (base64 or hex, 16/24/32 bytes); default $"+launcher.EnvClusterKey)
	fs.DurationVar(&m.rdzvTimeout, "rdzv-timeout", 15*time.Minute, "multi-host: how long a rendezvous round may wait for its hosts (static: for the master)")
	fs.DurationVar(&m.lastCall, "rdzv-last-call", 30*time.Second, "multi-host, --nnodes MIN:MAX: once MIN hosts are there, how long to wait for more")
	fs.StringVar(&m.gossip, "gossip", "lan", "multi-host: failure-detection preset, lan (dead within ~13 s), wan, or local (~3 s)")
	fs.StringVar(&m.tlsCert, "tls-cert", "", "multi-host: PEM certificate for the workers' gRPC data plane (with --tls-key and --tls-ca)")
	fs.StringVar(&m.tlsKey, "tls-key", "", "multi-host: PEM private key of --tls-cert")
	fs.StringVar(&m.tlsCA, "tls-ca", "", "multi-host: PEM CA bundle the peers' certificates must chain to")
	addTorchrunFlags(fs, &c.tr)
	c.usageText = usageHead + fs.FlagUsages() + usageExit

	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		c.help = true
		return c, nil
	} else if err != nil {
		switch {
		case c.config != "" && strings.HasPrefix(err.Error(), "unknown flag"):
			err = fmt.Errorf("%w (flags for %s go after --)", err, trainerName)
		case strings.HasPrefix(err.Error(), "unknown"):
			err = fmt.Errorf("%w (ddplaunch takes torchrun's flags in both spellings and its own, see --help and README's "+
				"\"Coming from torchrun\"; the program's own flags go after PROGRAM)", err)
		}
		return nil, err
	}
	if err := applyPET(fs, getenv); err != nil {
		return nil, err
	}
	if err := resolveTorchrun(fs, c); err != nil {
		return nil, err
	}
	if err := c.multi.resolve(fs, c, getenv); err != nil {
		return nil, err
	}
	if err := checkFlags(c); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if c.config == "" {
		if len(c.sets) > 0 {
			return nil, errors.New("--set needs --config")
		}
		if len(rest) == 0 {
			if c.tr.module {
				return nil, errors.New("-m/--module: no MODULE to run")
			}
			return nil, errors.New("no PROGRAM to run (or --config for the built-in trainer)")
		}
		prog, args, via, err := pythonCommand(c.tr, rest[0], rest[1:], getenv)
		if err != nil {
			return nil, err
		}
		c.opts.Program, c.opts.Args, c.viaPython, c.script = prog, args, via, rest[0]
		return c, nil
	}
	if c.tr.module || c.tr.runPath || c.tr.noPython {
		return nil, fmt.Errorf("--config runs %s: -m/--module, --run-path and --no-python are for a PROGRAM", trainerName)
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
	if c.config != "" {
		// Once here rather than in every worker; exit 2 as for a usage error (package doc).
		if c.loaded, err = config.Load(c.config, c.sets); err != nil {
			fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err)
			return 2
		}
	}
	pyPath := ""
	if c.viaPython {
		if pyPath, err = checkInterpreter(c.opts.Program, c.script); err != nil {
			fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err)
			return launcher.ExitNotFound
		}
		fmt.Fprintln(os.Stderr, interpreterLine(c.script, c.opts.Program, pyPath, getenv("PYTHON_EXEC") != ""))
	}
	gpus := launcher.DefaultGPUProbe().Count()
	nproc, err := launcher.ResolveNProc(c.nproc, gpus)
	if err == nil {
		err = launcher.CheckNProc(nproc, launcher.ThisHost(), c.opts.Oversubscribe)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err)
		return 2
	}
	if err := c.checkBatch(nproc); err != nil {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err) // once here rather than in every worker
		return 2
	}
	o := c.opts
	o.NProcPerNode = nproc
	if c.multi.kind != rdzvLocal {
		rdzv, env, err := c.multi.rendezvous(c, nproc, gpus)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err)
			return 2
		}
		o.Rendezvous = rdzv
		o.Env = append(os.Environ(), env...)
	}
	o.VisibleGPUs = gpus
	if v, ok := lookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		o.VisibleDevices = launcher.ParseVisibleDevices(v)
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = os.Stderr
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, c.signals...)
	defer signal.Stop(sigs)
	o.Signals = sigs

	err = launcher.Run(context.Background(), o)
	var we *launcher.WorkerError
	var se *launcher.SignalError
	if err != nil && !errors.As(err, &we) && !errors.As(err, &se) {
		fmt.Fprintf(os.Stderr, "ddplaunch: %v\n", err) // the others are reported by Run
	}
	if we != nil && c.viaPython {
		fmt.Fprintln(os.Stderr, interpreterHint(pyPath))
	}
	return launcher.ExitCode(err)
}

// checkBatch checks the --config run's batch against the world it will have, when the host count
// is fixed (not an elastic MIN:MAX) and the micro-batch is not searched for: the one config check
// that needs the world, which would otherwise fail in every worker at once.
func (c *cli) checkBatch(nproc int) error {
	if c.loaded == nil || c.loaded.Train.MicroBatchAuto {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(c.nnodes))
	if err != nil || n < 1 {
		return nil
	}
	_, err = c.loaded.Train.ResolveBatch(n * nproc)
	return err
}
