package main

// torchrun drop-in (issue 20): torchrun's flags in both spellings, with torchrun's meaning, its
// PET_* environment defaults, Python programs run through the interpreter, and the flags goddp
// cannot honour refused with what to do instead. README's "Coming from torchrun" has the table.

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goddp/goddp/launcher"
	"github.com/spf13/pflag"
)

// torchrunFlags are the flags torchrun has and ddplaunch had not (the shared ones, --nnodes,
// --nproc-per-node, --node-rank, --master-addr, --master-port, --max-restarts, --log-dir and
// --rdzv-id, live in cli and multiFlags).
type torchrunFlags struct {
	standalone  bool
	backend     string // --rdzv-backend: "" (not given), static, c10d, memberlist
	endpoint    string // --rdzv-endpoint HOST[:PORT]
	rdzvConf    string // --rdzv-conf k=v,...
	monitor     float64
	startMethod string
	role        string
	module      bool // -m
	noPython    bool
	runPath     bool
	redirects   string // -r
	tee         string // -t
	ranksFilter string
	localAddr   string
	signals     string
	shutdown    int // --shutdown-timeout seconds; 0 = not given
	eventLog    string
	refused     map[string]*string // flags goddp cannot honour: name → value
}

// The rendezvous backends --rdzv-backend takes.
const (
	backendStatic = "static"
	backendC10d   = "c10d"
	backendGossip = "memberlist" // goddp's own, also chosen by --join
)

// defaultC10dPort is torchrun's port for a c10d endpoint given without one.
const defaultC10dPort = 29400

// defaultStaticPort is torchrun's --master-port for a static rendezvous of several hosts.
const defaultStaticPort = 29500

// refusedFlags are torchrun's flags that ddplaunch cannot honour, with what to do instead. They
// are hidden from --help and refused whenever given (or set through PET_*).
var refusedFlags = []struct{ name, why string }{
	{"logs-specs", "torchrun's LogsSpecs plugins are Python entry points; ddplaunch writes torchrun's --log-dir layout " +
		"itself (LOG_DIR/RUN_ID_x/attempt_N/LOCAL_RANK/{stdout.log,stderr.log,error.json}): drop the flag"},
	{"numa-binding", "ddplaunch does not bind workers to NUMA nodes; bind them yourself, e.g. a wrapper script that runs " +
		"`numactl --cpunodebind=N --membind=N PROGRAM` with N chosen from $LOCAL_RANK"},
	{"virtual-local-rank", "goddp's workers pick GPU LOCAL_RANK % (visible GPUs) and ddplaunch leaves CUDA_VISIBLE_DEVICES " +
		"as it is; to give each worker one GPU at index 0, set CUDA_VISIBLE_DEVICES=$LOCAL_RANK in a wrapper script"},
	{"duplicate-stdout-filters", "ddplaunch copies no filtered lines to extra files; grep the --log-dir files " +
		"(attempt_N/LOCAL_RANK/stdout.log) instead"},
	{"duplicate-stderr-filters", "ddplaunch copies no filtered lines to extra files; grep the --log-dir files " +
		"(attempt_N/LOCAL_RANK/stderr.log) instead"},
	{"use-env", "that is torch.distributed.launch's flag; torchrun and ddplaunch always pass LOCAL_RANK in the environment: drop it"},
}

// petFlags are the torchrun flags that read PET_<NAME> when not given (torchrun's argparse
// "env" and "check_env" actions: PET_NPROC_PER_NODE, PET_NNODES, PET_RDZV_ENDPOINT, ...; Kubeflow's
// PyTorchJob sets some of them).
var petFlags = []string{
	"nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "standalone",
	"max-restarts", "monitor-interval", "start-method", "event-log-handler", "role", "module", "no-python",
	"run-path", "log-dir", "redirects", "tee", "local-ranks-filter", "node-rank", "master-addr",
	"master-port", "local-addr", "signals-to-handle", "shutdown-timeout", "virtual-local-rank",
	"duplicate-stdout-filters", "duplicate-stderr-filters",
}

// petName is the PET_ variable of a flag: PET_ and the name in capitals with _ for -.
func petName(flag string) string {
	return "PET_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// underscoreToDash makes every flag answer to both spellings, as torchrun's: --nproc_per_node is
// --nproc-per-node (goddp's own flags too: --max_restarts, --cluster_key_file).
func underscoreToDash(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}

// addTorchrunFlags registers torchrun's flags that ddplaunch did not have.
func addTorchrunFlags(fs *pflag.FlagSet, t *torchrunFlags) {
	fs.BoolVar(&t.standalone, "standalone", false, "torchrun: one host with its own rendezvous on a free port and a fresh run id")
	fs.StringVar(&t.backend, "rdzv-backend", "", "torchrun: static (fixed hosts: --node-rank and --master-addr or --rdzv-endpoint on each), "+
		"c10d (the same, with --node-rank), or memberlist (--join); default memberlist with --join, else static")
	fs.StringVar(&t.endpoint, "rdzv-endpoint", "", fmt.Sprintf("torchrun: HOST:PORT of node rank 0, the workers' MASTER_ADDR:MASTER_PORT (c10d: port %d when not given)", defaultC10dPort))
	fs.StringVar(&t.rdzvConf, "rdzv-conf", "", "torchrun: k=v,...: join_timeout or timeout (seconds, as --rdzv-timeout), last_call_timeout (as --rdzv-last-call)")
	fs.Float64Var(&t.monitor, "monitor-interval", 0.1, "torchrun: seconds between checks of the workers; accepted, ddplaunch learns of an exit at once")
	fs.StringVar(&t.startMethod, "start-method", "spawn", "torchrun: spawn, fork or forkserver; accepted, each worker is a new process (as torchrun runs a script)")
	fs.StringVar(&t.role, "role", launcher.DefaultRole, "torchrun: the workers' role, ROLE_NAME")
	fs.BoolVarP(&t.module, "module", "m", false, "torchrun: PROGRAM is a Python module: python -m PROGRAM")
	fs.BoolVar(&t.noPython, "no-python", false, "torchrun: run PROGRAM itself, also a .py file (not through python)")
	fs.BoolVar(&t.runPath, "run-path", false, "torchrun: run PROGRAM with python (as torchrun's runpy.run_path, in a new interpreter); takes precedence over --no-python")
	fs.StringVarP(&t.redirects, "redirects", "r", "0", "torchrun: streams to the log files only, not the console: 0 none, 1 stdout, 2 stderr, 3 both; or per local rank, 0:3,1:0")
	fs.StringVarP(&t.tee, "tee", "t", "0", "torchrun: streams to the log files and the console (same values as --redirects); a tee'd stream is never redirected")
	fs.StringVar(&t.ranksFilter, "local-ranks-filter", "", "torchrun: only these local ranks' output on the console, e.g. 0,1 (the log files keep every rank's)")
	fs.StringVar(&t.localAddr, "local-addr", "", "torchrun: this host's address; ddplaunch's --advertise-addr (an IP; gossip rendezvous)")
	fs.StringVar(&t.signals, "signals-to-handle", "SIGTERM,SIGINT", "torchrun: signals forwarded to every worker, which then stop (torchrun's default adds SIGHUP,SIGQUIT)")
	fs.IntVar(&t.shutdown, "shutdown-timeout", 0, "torchrun: seconds between the stop signal and SIGKILL; --grace in seconds")
	fs.StringVar(&t.eventLog, "event-log-handler", "null", "torchrun: only null (no handler) is accepted: ddplaunch logs its events on stderr")
	t.refused = map[string]*string{}
	for _, r := range refusedFlags {
		v := new(string)
		t.refused[r.name] = v
		fs.StringVar(v, r.name, "", "refused: "+r.why)
		fs.MarkHidden(r.name) //nolint:errcheck // the flag was just defined
	}
}

// applyPET sets each torchrun flag not given on the command line from its PET_ variable, as
// torchrun does; it then counts as given. Errors name the variable.
func applyPET(fs *pflag.FlagSet, getenv func(string) string) error {
	for _, name := range petFlags {
		v := getenv(petName(name))
		if v == "" || fs.Changed(name) {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("$%s=%q (--%s): %v", petName(name), v, name, err)
		}
	}
	return nil
}

// resolveTorchrun checks and applies torchrun's flags once parsed: the refused ones, the aliases
// (--local-addr, --shutdown-timeout, --rdzv-conf's keys), and the values ddplaunch passes on.
func resolveTorchrun(fs *pflag.FlagSet, c *cli) error {
	t := &c.tr
	for _, r := range refusedFlags {
		if fs.Changed(r.name) {
			return fmt.Errorf("--%s is not supported: %s", r.name, r.why)
		}
	}
	if t.eventLog != "null" {
		return fmt.Errorf("--event-log-handler %q is not supported: torchelastic's event handlers are Python; "+
			"ddplaunch logs its events on stderr (log/slog): drop the flag", t.eventLog)
	}
	if !(t.monitor > 0) {
		return fmt.Errorf("--monitor-interval %v: want seconds above 0", t.monitor)
	}
	switch t.startMethod {
	case "spawn", "fork", "forkserver":
	default:
		return fmt.Errorf("--start-method %q: want spawn, fork or forkserver", t.startMethod)
	}
	if strings.TrimSpace(t.role) == "" {
		return fmt.Errorf("--role %q: want a name", t.role)
	}
	c.opts.Role = t.role
	var err error
	if c.opts.Redirects, err = launcher.ParseStdSpec("--redirects", t.redirects); err != nil {
		return err
	}
	if c.opts.Tee, err = launcher.ParseStdSpec("--tee", t.tee); err != nil {
		return err
	}
	if t.ranksFilter != "" {
		for _, f := range strings.Split(t.ranksFilter, ",") {
			lr, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || lr < 0 {
				return fmt.Errorf("--local-ranks-filter %q: want local ranks separated by commas, e.g. 0,1", t.ranksFilter)
			}
			c.opts.ConsoleRanks = append(c.opts.ConsoleRanks, lr)
		}
	}
	if c.signals, err = parseSignals(t.signals); err != nil {
		return err
	}
	if fs.Changed("shutdown-timeout") {
		if fs.Changed("grace") {
			return fmt.Errorf("--shutdown-timeout and --grace are the same setting: give one")
		}
		if t.shutdown <= 0 {
			return fmt.Errorf("--shutdown-timeout %d: want seconds above 0", t.shutdown)
		}
		c.opts.Grace = time.Duration(t.shutdown) * time.Second
	}
	if fs.Changed("local-addr") {
		if fs.Changed("advertise-addr") {
			return fmt.Errorf("--local-addr and --advertise-addr are the same setting: give one")
		}
		if err := fs.Set("advertise-addr", t.localAddr); err != nil {
			return err
		}
	}
	return applyRdzvConf(fs, t.rdzvConf)
}

// applyRdzvConf maps torchrun's --rdzv-conf keys onto ddplaunch's flags: join_timeout (c10d) and
// timeout (static) onto --rdzv-timeout, last_call_timeout onto --rdzv-last-call, in seconds.
// Other keys configure torchrun's TCP store, which goddp has no counterpart of: refused.
func applyRdzvConf(fs *pflag.FlagSet, conf string) error {
	if strings.TrimSpace(conf) == "" {
		return nil
	}
	for _, kv := range strings.Split(conf, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return fmt.Errorf("--rdzv-conf %q: want key=value,... (e.g. join_timeout=900)", conf)
		}
		var flag string
		switch k {
		case "join_timeout", "timeout":
			flag = "rdzv-timeout"
		case "last_call_timeout":
			flag = "rdzv-last-call"
		default:
			return fmt.Errorf("--rdzv-conf %s: not supported (it configures torchrun's TCP store, which goddp's rendezvous has "+
				"no counterpart of); the keys ddplaunch takes are join_timeout, timeout and last_call_timeout", k)
		}
		if fs.Changed(flag) {
			return fmt.Errorf("--rdzv-conf %s and --%s are the same setting: give one", k, flag)
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || !(s > 0) {
			return fmt.Errorf("--rdzv-conf %s=%q: want seconds above 0", k, v)
		}
		if err := fs.Set(flag, (time.Duration(s * float64(time.Second))).String()); err != nil {
			return err
		}
	}
	return nil
}

// signalNames are the signals --signals-to-handle may name (SIGKILL and SIGSTOP cannot be caught).
var signalNames = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT,
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGALRM": syscall.SIGALRM, "SIGXCPU": syscall.SIGXCPU,
}

// parseSignals parses --signals-to-handle: names with or without SIG, any case, comma-separated.
func parseSignals(s string) ([]os.Signal, error) {
	var out []os.Signal
	for _, f := range strings.Split(s, ",") {
		n := strings.ToUpper(strings.TrimSpace(f))
		if !strings.HasPrefix(n, "SIG") {
			n = "SIG" + n
		}
		sig, ok := signalNames[n]
		if !ok {
			names := make([]string, 0, len(signalNames))
			for k := range signalNames {
				names = append(names, k)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("--signals-to-handle %q: %q is not one of %s", s, strings.TrimSpace(f), strings.Join(names, ", "))
		}
		if !slices.Contains(out, os.Signal(sig)) {
			out = append(out, sig)
		}
	}
	return out, nil
}

// pythonCommand is how PROGRAM runs, as torchrun runs its training script: through the
// interpreter ($PYTHON_EXEC, torchrun's override, else python3 from $PATH) with -u (unbuffered,
// so lines arrive as they are printed) for -m MODULE (python -u -m MODULE ARGS), --run-path, and a
// PROGRAM ending in .py; anything else, and everything with --no-python, runs as it is. torchrun
// puts python before every program unless --no-python; ddplaunch only before .py files, so that
// `ddplaunch sh -c ...` and binaries keep working. via says the interpreter runs it.
func pythonCommand(t torchrunFlags, prog string, args []string, getenv func(string) string) (string, []string, bool, error) {
	switch {
	case t.module && t.noPython:
		return "", nil, false, fmt.Errorf("-m/--module and --no-python cannot go together (as with torchrun): a module needs python")
	case t.module && t.runPath:
		return "", nil, false, fmt.Errorf("-m/--module and --run-path cannot go together: give a module or a script path")
	}
	if !t.module && !t.runPath && (t.noPython || !strings.HasSuffix(prog, ".py")) {
		return prog, args, false, nil
	}
	py := getenv("PYTHON_EXEC")
	if py == "" {
		py = "python3"
	}
	out := []string{"-u"}
	if t.module {
		out = append(out, "-m")
	}
	out = append(out, prog)
	return py, append(out, args...), true, nil
}

// checkInterpreter finds the interpreter PROGRAM runs with when it runs through python, and says
// what to do if there is none (run exits 127 then, as for a program not found). It returns the
// interpreter's path, which ddplaunch prints (interpreterLine) so a user sees which one ran.
func checkInterpreter(py, script string) (string, error) {
	path, err := exec.LookPath(py)
	if err != nil {
		return "", fmt.Errorf("%s runs with the Python interpreter, as torchrun runs it, but %s: %v; install python3, "+
			"set $PYTHON_EXEC to the interpreter, or pass --no-python to run PROGRAM itself", script, py, err)
	}
	return path, nil
}

// interpreterLine is what ddplaunch says before the workers start when PROGRAM runs through
// python: which interpreter, where it was found, and how to choose another.
func interpreterLine(script, py, path string, fromEnv bool) string {
	from := "python3 from $PATH; set $PYTHON_EXEC to use another"
	if fromEnv {
		from = "from $PYTHON_EXEC"
	}
	return fmt.Sprintf("ddplaunch: %s runs with %s (%s, %s)", script, py, path, from)
}

// interpreterHint follows a failed job whose PROGRAM ran through python: a script that fails to
// import torch (ModuleNotFoundError) usually ran with another interpreter than the user's.
func interpreterHint(path string) string {
	return fmt.Sprintf("ddplaunch: the workers ran %s; if a module was not found (torch?), set $PYTHON_EXEC to the "+
		"interpreter that has it, e.g. PYTHON_EXEC=$(command -v python3.12)", path)
}

// newRunID is --standalone's run id, a random UUID as torchrun's (uuid4).
func newRunID() string {
	var b [16]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
