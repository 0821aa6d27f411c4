package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Options configures Run. Program and NProcPerNode are required; every other field has a default.
type Options struct {
	// NProcPerNode is the number of workers on this host (--nproc-per-node, already resolved from
	// gpu/cpu/auto by ResolveNProc).
	NProcPerNode int
	// Program and Args are the worker command line. Each worker runs the same one.
	Program string
	Args    []string
	// Dir is the workers' working directory; "" = the launcher's.
	Dir string
	// Env is the base environment of every worker before BuildEnv adds the launcher's variables;
	// nil = os.Environ().
	Env []string

	// MasterAddr and MasterPort are MASTER_ADDR and MASTER_PORT for the default LocalRendezvous:
	// "" = 127.0.0.1, 0 = a free port drawn for each attempt. Ignored when Rendezvous is set.
	MasterAddr string
	MasterPort int
	// Rendezvous decides node rank, world size and master per attempt; nil = a LocalRendezvous
	// (one host) from the fields above.
	Rendezvous Rendezvous

	// MaxRestarts is how many times the whole group is restarted after a worker fails
	// (--max-restarts). A signal to the launcher or the end of ctx never restarts.
	MaxRestarts int
	// Grace is how long workers have between SIGTERM and SIGKILL when they are stopped; 0 = 10s.
	Grace time.Duration
	// TailLines is how many last lines of a failed worker's output the report shows; 0 = 10.
	TailLines int

	// Oversubscribe lets NProcPerNode exceed MaxWorkersPerCPU workers per CPU (--oversubscribe);
	// see CheckNProc. Limits are the host's limits; nil = ThisHost().
	Oversubscribe bool
	Limits        *HostLimits

	// LogDir, when set, receives every rank's output twice: in LogDir/rank-N.log (appended, one
	// header line per attempt), and in torchrun's layout, LogDir/RUN_ID_x/attempt_N/LOCAL_RANK/
	// {stdout.log,stderr.log} (LogLayout), where TORCHELASTIC_ERROR_FILE points at error.json. It is
	// created if needed. With Redirects or Tee set and no LogDir, Run makes a temporary one, as
	// torchrun does.
	LogDir string
	// Redirects and Tee are torchrun's --redirects and --tee: the streams of the local ranks that
	// Redirects names go to the log files only, not to Stdout/Stderr, unless Tee names them too
	// (ToConsole). The zero values keep every stream on the console.
	Redirects, Tee StdSpec
	// ConsoleRanks, when not nil, are the only local ranks whose lines reach Stdout and Stderr
	// (torchrun's --local-ranks-filter); the log files keep every rank's.
	ConsoleRanks []int

	// RunID is the job's run id: TORCHELASTIC_RUN_ID and the prefix of the run's directory under
	// LogDir; "" = "none", torchrun's default. Role is ROLE_NAME; "" = DefaultRole.
	RunID, Role string
	// Stdout and Stderr receive the workers' prefixed lines and the launcher's own messages;
	// nil = os.Stdout, os.Stderr.
	Stdout, Stderr io.Writer
	// Progress, when not nil, is handed to global rank 0 as fd 3 with DDP_PROGRESS_FD=3 so that it
	// alone draws a progress bar there. cmd/ddplaunch passes its stderr when that is a terminal.
	// Run does not close it.
	Progress *os.File
	// VisibleGPUs is the GPU count workers see (GPUProbe.Count), used to warn when workers share a
	// GPU; 0 = CPU workers. VisibleDevices optionally names them (CUDA_VISIBLE_DEVICES entries).
	VisibleGPUs    int
	VisibleDevices []string

	// Signals delivers the signals the launcher receives (cmd/ddplaunch: SIGINT and SIGTERM); each
	// is forwarded to every worker. nil = none.
	Signals <-chan os.Signal
	// Logger receives the launcher's events; nil = text lines on Stderr.
	Logger *slog.Logger
}

// WorkerError is Run's error when a worker failed and no restart was left.
type WorkerError struct {
	Rank, LocalRank int
	Pid             int
	Status          ExitStatus
	Tail            []string
	Restarts        int // restarts used before this failure
}

func (e *WorkerError) Error() string {
	return fmt.Sprintf("launcher: rank %d (local rank %d, pid %d) failed: %v", e.Rank, e.LocalRank, e.Pid, e.Status)
}

// ExitCode is the launcher's exit code for this failure: the worker's code, or 128+signal.
func (e *WorkerError) ExitCode() int { return e.Status.ExitCode() }

// SignalError is Run's error when a signal to the launcher stopped the job.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string { return fmt.Sprintf("launcher: stopped by signal %v", e.Signal) }

// ExitCode is 128+signal, as a shell reports a process killed by it.
func (e *SignalError) ExitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// LostError is Run's error when the rendezvous reported the membership broken and no restart was
// left (multi-host).
type LostError struct{ Err error }

func (e *LostError) Error() string { return "launcher: job membership lost: " + e.Err.Error() }
func (e *LostError) Unwrap() error { return e.Err }

// ExitCode maps Run's error to the launcher's exit status (ddplaunch --help lists them):
//
//	0        nil: every worker exited 0
//	N        *WorkerError: the root failure's exit code (Blame), or 128+signal when a signal killed it
//	128+N    *SignalError: the launcher was stopped by signal N (SIGINT 130, SIGTERM 143)
//	2        *ConfigError: bad options, found before any worker started (as a usage error)
//	126, 127 *StartError: the program is not executable, or not found (as a shell says)
//	1        anything else: the rendezvous failed or timed out, a host was lost, a restart was refused
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		if n := c.ExitCode(); n != 0 {
			return n
		}
	}
	return ExitFailure
}

func (o *Options) setDefaults() {
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.RunID == "" {
		o.RunID = "none"
	}
	if o.Role == "" {
		o.Role = DefaultRole
	}
	if o.Grace == 0 {
		o.Grace = 10 * time.Second
	}
	if o.TailLines == 0 {
		o.TailLines = 10
	}
	if o.Limits == nil {
		h := ThisHost()
		o.Limits = &h
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
}

// textLogger is the default Logger: slog text lines without the time, on w.
func textLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// validate checks the options after setDefaults; every error is a *ConfigError naming the flag.
func (o *Options) validate() error {
	var err error
	switch {
	case o.Program == "":
		err = errors.New("no program to run")
	case o.MaxRestarts < 0:
		err = fmt.Errorf("--max-restarts %d: want 0 or more", o.MaxRestarts)
	case o.MasterPort < 0 || o.MasterPort > 65535:
		err = fmt.Errorf("--master-port %d: want 0..65535", o.MasterPort)
	case o.Grace < 0:
		err = fmt.Errorf("--grace %v: want a positive duration", o.Grace)
	case o.TailLines < 0:
		err = fmt.Errorf("TailLines %d: want 0 or more", o.TailLines)
	case o.Redirects.Check("--redirects", o.NProcPerNode) != nil:
		err = o.Redirects.Check("--redirects", o.NProcPerNode)
	case o.Tee.Check("--tee", o.NProcPerNode) != nil:
		err = o.Tee.Check("--tee", o.NProcPerNode)
	default:
		return CheckNProc(o.NProcPerNode, *o.Limits, o.Oversubscribe)
	}
	return &ConfigError{Err: err}
}

// Run runs a job on this host: for each attempt it asks the Rendezvous for the world, starts
// NProcPerNode workers with BuildEnv's environment, and supervises them (Supervise). It returns
// nil when every worker of an attempt exited 0. After a worker failure it prints the failed rank,
// its status and last lines, and either restarts the whole group (while MaxRestarts allows) or
// returns a *WorkerError. A signal on Options.Signals ends the job with a *SignalError after the
// workers have stopped; the end of ctx with ctx's error. Run returns only when no worker (and no
// process in a worker's group) is left.
func Run(ctx context.Context, o Options) error {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return err
	}
	rdzv := o.Rendezvous
	if rdzv == nil {
		r, err := NewLocalRendezvous(o.MasterAddr, o.MasterPort, o.NProcPerNode)
		if err != nil {
			return err
		}
		rdzv = r
	}
	if c, ok := rdzv.(io.Closer); ok {
		defer c.Close()
	}
	// One SyncWriter per destination: workers' lines, reports and log records never interleave.
	stdout := &SyncWriter{W: o.Stdout}
	stderr := &SyncWriter{W: o.Stderr}
	log := o.Logger
	if log == nil {
		log = textLogger(stderr)
	}

	if env, ok := DefaultOMPThreads(o.Env, o.NProcPerNode); ok {
		o.Env = env
		log.Warn("ddplaunch: setting OMP_NUM_THREADS=1 for every worker, as torchrun does with more than one worker per host, " +
			"so that their OpenMP threads do not overload the system; set OMP_NUM_THREADS yourself to tune it")
	}
	if o.LogDir == "" && (!o.Redirects.IsZero() || !o.Tee.IsZero()) {
		dir, err := os.MkdirTemp("", "ddplaunch_")
		if err != nil {
			return fmt.Errorf("launcher: log dir for --redirects/--tee: %w", err)
		}
		o.LogDir = dir
	}
	logs := make([]*os.File, o.NProcPerNode)
	var layout *LogLayout
	if o.LogDir != "" {
		if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
			return fmt.Errorf("launcher: log dir: %w", err)
		}
		l, err := NewLogLayout(o.LogDir, o.RunID)
		if err != nil {
			return fmt.Errorf("launcher: log dir: %w", err)
		}
		layout = &l
		log.Info("ddplaunch: logs in torchrun's layout", "dir", l.Dir, "files", "attempt_N/LOCAL_RANK/{stdout.log,stderr.log,error.json}",
			"per_rank", filepath.Join(o.LogDir, "rank-N.log"))
	}
	console := func(lr int) bool { return o.ConsoleRanks == nil || slices.Contains(o.ConsoleRanks, lr) }
	defer func() {
		for _, f := range logs {
			if f != nil {
				f.Close()
			}
		}
	}()
	if msg := GPUSharing(o.NProcPerNode, o.VisibleGPUs, o.VisibleDevices); msg != "" {
		log.Warn("ddplaunch: workers share GPUs; each uses GPU LOCAL_RANK % " + fmt.Sprint(o.VisibleGPUs) + ": " + msg)
	}
	portRedraws := 0 // attempts started again because their drawn master port was taken: not restarts
	for attempt := 0; ; attempt++ {
		restarts := attempt - portRedraws
		if sig := pendingSignal(o.Signals); sig != nil {
			return &SignalError{Signal: sig}
		}
		var asg Assignment
		var err error
		sig := whileWatching(ctx, o.Signals, func(ctx context.Context) { asg, err = rdzv.Next(ctx, attempt) })
		if sig != nil { // a multi-host round may wait for minutes: a signal ends the wait
			log.Warn("ddplaunch: stopped by signal while waiting for the rendezvous", "signal", sig.String())
			return &SignalError{Signal: sig}
		}
		if err != nil {
			return fmt.Errorf("launcher: rendezvous for attempt %d: %w", attempt, err)
		}
		specs := make([]WorkerSpec, o.NProcPerNode)
		attemptLogs := make([]rankLogs, o.NProcPerNode)
		closeAttemptLogs := func() {
			for _, l := range attemptLogs {
				l.close()
			}
		}
		same := &SameLines{} // an error every rank prints goes to the console once
		for lr := range specs {
			rank := asg.RankOffset + lr
			we := WorkerEnv{
				Rank: rank, LocalRank: lr, WorldSize: asg.WorldSize, LocalWorldSize: o.NProcPerNode,
				NodeRank: asg.NodeRank, NNodes: asg.NNodes,
				MasterAddr: asg.MasterAddr, MasterPort: asg.MasterPort, Token: asg.Token,
				RestartCount: restarts, MaxRestarts: o.MaxRestarts,
				Torchrun: &TorchrunEnv{RunID: o.RunID, Role: o.Role},
			}
			var extra []*os.File
			if rank == 0 && o.Progress != nil {
				extra = []*os.File{o.Progress}
				we.ProgressFD = ProgressFD
			}
			sink := &RankOutput{Rank: rank, Same: same, Prog: filepath.Base(o.Program)}
			if console(lr) && ToConsole(o.Redirects, o.Tee, lr, Stdout) {
				sink.Stdout = stdout
			}
			if console(lr) && ToConsole(o.Redirects, o.Tee, lr, Stderr) {
				sink.Stderr = stderr
			}
			if o.LogDir != "" {
				if logs[lr] == nil {
					if logs[lr], err = openRankLog(o.LogDir, rank); err != nil {
						closeAttemptLogs()
						return fmt.Errorf("launcher: %w", err)
					}
				}
				if attemptLogs[lr], err = layout.openRankLogs(attempt, lr); err != nil {
					closeAttemptLogs()
					return fmt.Errorf("launcher: log dir: %w", err)
				}
				sink.OutLog, sink.ErrLog = attemptLogs[lr].out, attemptLogs[lr].err
				we.Torchrun.ErrorFile = layout.ErrorFile(attempt, lr)
				fmt.Fprintf(logs[lr], "=== ddplaunch: rank %d, attempt %d (restart count %d), %s ===\n",
					rank, attempt, restarts, time.Now().Format(time.RFC3339))
				sink.Log = logs[lr]
			}
			specs[lr] = WorkerSpec{
				Rank: rank, LocalRank: lr, Path: o.Program, Args: o.Args, Dir: o.Dir,
				Env: BuildEnv(o.Env, we), ExtraFiles: extra, Sink: sink,
			}
		}
		log.Info("ddplaunch: starting workers", "nproc", o.NProcPerNode, "world_size", asg.WorldSize,
			"node_rank", asg.NodeRank, "nnodes", asg.NNodes,
			"master", fmt.Sprintf("%s:%d", asg.MasterAddr, asg.MasterPort),
			"restart", restarts, "max_restarts", o.MaxRestarts)

		out, err := Supervise(ctx, specs, SuperviseConfig{
			Grace: o.Grace, Signals: o.Signals, Lost: asg.Lost, TailLines: o.TailLines,
		})
		closeAttemptLogs()
		if err != nil {
			reportEnd(rdzv, attempt, err)
			return err
		}
		if len(out.Killed) > 0 {
			log.Warn("ddplaunch: SIGKILLed workers that outlived the grace period", "ranks", out.Killed, "grace", o.Grace)
		}
		var end error
		switch {
		case out.Succeeded():
			reportEnd(rdzv, attempt, nil)
			log.Info("ddplaunch: all workers exited 0", "nproc", o.NProcPerNode, "restarts", restarts)
			return nil
		case out.Signal != nil:
			end = &SignalError{Signal: out.Signal}
			reportEnd(rdzv, attempt, end)
			log.Warn("ddplaunch: stopped by signal; forwarded to every worker", "signal", out.Signal.String())
			return end
		case out.Ctx != nil:
			reportEnd(rdzv, attempt, out.Ctx)
			return out.Ctx
		case out.Lost != nil:
			end = &LostError{Err: out.Lost}
			log.Error("ddplaunch: " + end.Error())
		case portRedraws < MaxPortRedraws && masterPortTaken(rdzv, out.Failure):
			portRedraws++
			f := out.Failure
			reportEnd(rdzv, attempt, &WorkerError{Rank: f.Rank, LocalRank: f.LocalRank, Pid: f.Pid, Status: f.Status, Tail: f.Tail, Restarts: restarts})
			log.Warn(fmt.Sprintf("ddplaunch: MASTER_PORT %d was taken by another process before rank 0 could listen on it; starting the workers again on another port (not a restart; %d of %d such redraws)",
				asg.MasterPort, portRedraws, MaxPortRedraws))
			continue
		default:
			f := out.Failure
			end = &WorkerError{Rank: f.Rank, LocalRank: f.LocalRank, Pid: f.Pid, Status: f.Status, Tail: f.Tail, Restarts: restarts}
			printFailure(stderr, f, out.Failures[1:])
			if layout != nil {
				p := layout.ErrorFile(attempt, f.LocalRank)
				if msg := ReadErrorFile(p); msg != "" {
					fmt.Fprintf(stderr, "ddplaunch: rank %d's error file (%s): %s\n", f.Rank, p, msg)
				}
			}
		}
		reportEnd(rdzv, attempt, end)
		// Multi-host: a dead peer breaks the ring before gossip declares it dead; name it.
		if lx, ok := rdzv.(LossExplainer); ok {
			var lost error
			if sig := whileWatching(ctx, o.Signals, func(ctx context.Context) { lost = lx.ExplainFailure(ctx, attempt) }); sig != nil {
				return &SignalError{Signal: sig}
			}
			if lost != nil {
				var le *LostError
				if !errors.As(end, &le) || le.Err.Error() != lost.Error() {
					end = &LostError{Err: lost}
					log.Error("ddplaunch: " + end.Error())
				}
			}
		}
		if restarts >= o.MaxRestarts {
			if o.MaxRestarts > 0 {
				log.Error("ddplaunch: no restart left", "max_restarts", o.MaxRestarts)
			}
			return end
		}
		log.Warn(fmt.Sprintf("ddplaunch: restarting all %d workers (restart %d of %d)", o.NProcPerNode, restarts+1, o.MaxRestarts))
	}
}

func reportEnd(r Rendezvous, attempt int, err error) {
	if ar, ok := r.(AttemptReporter); ok {
		ar.ReportEnd(attempt, err)
	}
}

// whileWatching runs fn with a context that also ends when a signal arrives on sigs, and returns
// that signal (nil when none came). No signal is taken from sigs once it returns.
func whileWatching(ctx context.Context, sigs <-chan os.Signal, fn func(context.Context)) os.Signal {
	if sigs == nil {
		fn(ctx)
		return nil
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got os.Signal
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case got = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	fn(cctx)
	close(stop)
	<-done
	return got
}

func pendingSignal(c <-chan os.Signal) os.Signal {
	select {
	case s := <-c:
		return s
	default:
		return nil
	}
}

// printFailure writes the failure report: which rank, how it ended, its last lines; then, one line
// each, the other workers that failed at about the same time (Blame's other candidates), with
// when their failure began relative to the root's. An error line another rank already showed
// is not repeated: "with the same error as rank R" (the console showed the line once too,
// SameLines).
func printFailure(w io.Writer, f *WorkerExit, others []WorkerExit) {
	var b strings.Builder
	fmt.Fprintf(&b, "ddplaunch: rank %d (local rank %d, pid %d) failed: %v\n", f.Rank, f.LocalRank, f.Pid, f.Status)
	shown := map[string]int{} // error lines in the report, by the first rank that showed them
	if len(f.Tail) == 0 {
		fmt.Fprintf(&b, "ddplaunch: rank %d wrote no output\n", f.Rank)
	} else {
		what := fmt.Sprintf("last %d lines", len(f.Tail))
		if len(f.Tail) == 1 {
			what = "last line"
		}
		fmt.Fprintf(&b, "ddplaunch: %s of rank %d:\n", what, f.Rank)
		for _, l := range f.Tail {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		if l := errorLineOf(*f); slices.Contains(f.Tail, l) {
			shown[l] = f.Rank
		}
	}
	for _, o := range others {
		d := failureBegan(o).Sub(failureBegan(*f)).Round(time.Millisecond)
		when := fmt.Sprintf("%v after", d)
		if d < 0 {
			when = fmt.Sprintf("%v before", -d)
		}
		why := ""
		if IsFollowOn(o) && !IsFollowOn(*f) {
			why = ", a consequence: its error says a peer went away"
		}
		line := errorLineOf(o)
		if r, ok := shown[line]; ok && line != "" {
			fmt.Fprintf(&b, "ddplaunch: rank %d also failed (%v), %s rank %d%s, with the same error as rank %d\n", o.Rank, o.Status, when, f.Rank, why, r)
			continue
		}
		shown[line] = o.Rank
		fmt.Fprintf(&b, "ddplaunch: rank %d also failed (%v), %s rank %d%s: %s\n", o.Rank, o.Status, when, f.Rank, why, line)
	}
	io.WriteString(w, b.String()) //nolint:errcheck
}

// errorLineOf is a failed worker's error line: its first error line, or its last line.
func errorLineOf(e WorkerExit) string {
	if e.ErrorLine == "" && len(e.Tail) > 0 {
		return e.Tail[len(e.Tail)-1]
	}
	return e.ErrorLine
}
