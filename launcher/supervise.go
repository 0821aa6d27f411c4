package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// WorkerSpec is one local worker process to run.
type WorkerSpec struct {
	Rank      int // global rank, for reports
	LocalRank int

	Path       string     // program; resolved by exec.Command's rules
	Args       []string   // arguments after the program name
	Env        []string   // the complete environment (BuildEnv)
	Dir        string     // working directory; "" = the launcher's
	ExtraFiles []*os.File // become fd 3, 4, ... in the worker; the caller keeps ownership

	Sink LineSink // receives the worker's stdout and stderr lines; nil discards them
}

// ExitStatus is how a worker process ended.
type ExitStatus struct {
	Code   int            // exit code when it exited; -1 when a signal killed it
	Signal syscall.Signal // the signal that killed it, or 0
}

// Failed reports whether the status is not a clean exit 0.
func (s ExitStatus) Failed() bool { return s.Code != 0 || s.Signal != 0 }

// ExitCode is the status as a shell reports it: the exit code, or 128+signal.
func (s ExitStatus) ExitCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

func (s ExitStatus) String() string {
	if s.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%v)", int(s.Signal), s.Signal)
	}
	return fmt.Sprintf("exit status %d", s.Code)
}

func statusOf(ps *os.ProcessState) ExitStatus {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Code: -1, Signal: ws.Signal()}
	}
	return ExitStatus{Code: ps.ExitCode()}
}

// WorkerExit is the end of one worker.
type WorkerExit struct {
	Rank, LocalRank int
	Pid             int
	Started         bool // false: never started (a signal or a failure came first); nothing else is set
	Status          ExitStatus
	Tail            []string  // its last output lines (both streams, in arrival order)
	Exited          time.Time // when the launcher saw it exit
	// ErrorAt is when the launcher read the worker's first error line on stderr (IsErrorLine), and
	// ErrorLine is that line; zero and "" when it wrote none.
	ErrorAt   time.Time
	ErrorLine string
	// Stopped says the launcher had already sent it the stop signal when it exited.
	Stopped bool
	// Program is the base name of the worker's program ("ddptrain"): IsFollowOn reads goddp's
	// trainer by its exit code, other programs by their words.
	Program string
}

// SuperviseConfig tunes Supervise. The zero value is usable: no grace (immediate SIGKILL after
// the stop signal), no forwarded signals, no tail.
type SuperviseConfig struct {
	// Grace is how long workers have to exit after the stop signal (SIGTERM, or the forwarded
	// one) before their process groups are SIGKILLed.
	Grace time.Duration
	// Signals delivers signals received by the launcher. The first is forwarded to every worker's
	// process group and starts the grace period; a second one SIGKILLs at once.
	Signals <-chan os.Signal
	// Lost, when it delivers, stops the workers (SIGTERM, grace) and ends the attempt as lost.
	Lost <-chan error
	// TailLines is how many last output lines of each worker to keep for reports.
	TailLines int
	// Drain is how long to wait for a worker's output pipes to reach EOF after it exited and its
	// process group was killed (a grandchild that escaped the group may hold them open). 0 = 2s.
	Drain time.Duration
	// RootCauseWindow is how long after the first failed exit another worker's failure may begin
	// and still be taken for the root cause (Blame); 0 = DefaultRootCauseWindow.
	RootCauseWindow time.Duration
	// Silence is how long a worker that has sent heartbeats (EnvHeartbeatFD: goddp's trainer
	// writes one a second) may go without one before it is taken for hung — stopped by SIGSTOP,
	// a frozen host process — and SIGKILLed as the job's root failure, naming it. A slow step
	// still beats (the beat comes from its own goroutine); a program that never beats is never
	// judged. 0 = DefaultSilence; negative: off.
	Silence time.Duration

	beforeStart func(i int, s *supervisor) // tests: called before worker i is started
}

// DefaultSilence is SuperviseConfig.Silence's default: a hung rank is found within about 6 s,
// long before the collective timeout (30 s) would end the job on a healthy rank's error.
const DefaultSilence = 5 * time.Second

// heartbeatPeriod is how often the supervisor looks for silent workers.
const heartbeatPeriod = 500 * time.Millisecond

// Outcome is how a supervised group ended. At most one of Failure, Signal, Lost and Ctx is set;
// none is set when every worker exited 0.
type Outcome struct {
	Exits []WorkerExit // one per WorkerSpec, in the same order
	// Failure is the root failure: of the workers that failed on their own (not because they were
	// stopped), the one Blame puts first. Failures are all of them, root first.
	Failure  *WorkerExit
	Failures []WorkerExit
	Signal   os.Signal // the launcher's signal that stopped the workers
	Lost     error     // the error from SuperviseConfig.Lost that stopped the workers
	Ctx      error     // ctx's error when its end stopped the workers
	Killed   []int     // ranks whose process group got SIGKILL after the grace period
}

// Succeeded reports whether every worker exited 0 with no stop requested.
func (o *Outcome) Succeeded() bool {
	return o.Failure == nil && o.Signal == nil && o.Lost == nil && o.Ctx == nil
}

// StartError is Supervise's error (and Run's) when a worker could not be started.
type StartError struct {
	Rank int
	Path string
	Err  error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("launcher: start rank %d (%s): %v", e.Rank, e.Path, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is what a shell answers for a command it cannot run: 127 when the program is not
// found, 126 when it is not executable; 1 for any other reason (no memory, too many processes).
func (e *StartError) ExitCode() int {
	switch {
	case errors.Is(e.Err, exec.ErrNotFound), errors.Is(e.Err, fs.ErrNotExist):
		return ExitNotFound
	case errors.Is(e.Err, fs.ErrPermission), errors.Is(e.Err, syscall.ENOEXEC), errors.Is(e.Err, syscall.EISDIR):
		return ExitNoExec
	}
	return ExitFailure
}

// proc is a started worker.
type proc struct {
	spec WorkerSpec
	cmd  *exec.Cmd
	pgid int
	tail *tail

	mu        sync.Mutex
	reaped    bool      // Wait returned: the pid may be reused, never signal it again
	errAt     time.Time // first error line on stderr
	errLine   string
	stoppedAt time.Time // when the stop signal was sent; zero before
	lastBeat  time.Time // the last heartbeat; zero before the first
	silent    bool      // judged hung: SIGKILLed for it
}

// beat records a heartbeat.
func (p *proc) beat(now time.Time) {
	p.mu.Lock()
	p.lastBeat = now
	p.mu.Unlock()
}

// signalGroup sends sig to the worker's process group unless the worker has been reaped. The
// group outlives its leader while any member lives, so this reaches grandchildren too.
func (p *proc) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		syscall.Kill(-p.pgid, sig) //nolint:errcheck // ESRCH: already gone
	}
}

// stopGroup is signalGroup for the stop signal: it also records that the worker was stopped.
func (p *proc) stopGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		if p.stoppedAt.IsZero() {
			p.stoppedAt = time.Now()
		}
		syscall.Kill(-p.pgid, sig) //nolint:errcheck // ESRCH: already gone
	}
}

// noteError records the worker's first error line and when it arrived.
func (p *proc) noteError(line []byte) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errAt.IsZero() {
		p.errAt, p.errLine = now, string(line)
	}
}

type exitEvent struct {
	idx  int
	exit WorkerExit
}

// Supervise starts one process per spec, each in its own process group, and watches them until
// all have exited:
//
//  1. All exit 0: Outcome.Succeeded().
//  2. One exits non-zero or dies by a signal: every other worker gets SIGTERM, then SIGKILL
//     after cfg.Grace; once all have exited, Blame picks the root failure among those that failed
//     on their own (Outcome.Failure).
//  3. A signal arrives on cfg.Signals, cfg.Lost delivers, or ctx ends: the same stop sequence
//     (with the received signal, else SIGTERM), recorded in the Outcome.
//
// Workers are started one by one; a signal, the end of ctx, Lost or a worker's failure while
// they are being started stops the starting at once (the rest are never started, Started false)
// and the ones already running are stopped as above. Whenever a worker exits, its process group
// is SIGKILLed, so no grandchild outlives it. Supervise returns only after every worker has been
// reaped and every goroutine it started has ended. The error is non-nil (a *StartError) only when
// a worker could not be started; the ones already started are SIGKILLed and reaped first.
func Supervise(ctx context.Context, specs []WorkerSpec, cfg SuperviseConfig) (*Outcome, error) {
	if len(specs) == 0 {
		return nil, errors.New("launcher: no workers to supervise")
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 2 * time.Second
	}
	if cfg.RootCauseWindow <= 0 {
		cfg.RootCauseWindow = DefaultRootCauseWindow
	}
	if cfg.Silence == 0 {
		cfg.Silence = DefaultSilence
	}
	s := &supervisor{
		cfg:    cfg,
		events: make(chan exitEvent, len(specs)),
		procs:  make([]*proc, 0, len(specs)),
		done:   make([]bool, len(specs)),
		out:    &Outcome{Exits: make([]WorkerExit, len(specs))},
		sigs:   cfg.Signals,
		lost:   cfg.Lost,
		ctx:    ctx,
		ctxC:   ctx.Done(),
	}
	for i, sp := range specs {
		s.out.Exits[i] = WorkerExit{Rank: sp.Rank, LocalRank: sp.LocalRank}
	}
	if cfg.Silence > 0 {
		t := time.NewTicker(heartbeatPeriod)
		defer t.Stop()
		s.tick = t.C
	}
	defer func() {
		if s.grace != nil {
			s.grace.Stop()
		}
	}()

	// Start the workers, one by one, watching for anything that says stop.
	for i, sp := range specs {
		if cfg.beforeStart != nil {
			cfg.beforeStart(i, s)
		}
		if s.poll(); s.stopping {
			break
		}
		p, err := startWorker(i, sp, cfg, s.events)
		if err != nil {
			for _, q := range s.procs {
				q.signalGroup(syscall.SIGKILL)
			}
			for j := range s.procs {
				if !s.done[j] {
					<-s.events
				}
			}
			return nil, &StartError{Rank: sp.Rank, Path: sp.Path, Err: err}
		}
		s.procs = append(s.procs, p)
	}

	for s.running() > 0 {
		s.wait()
	}
	if s.failed != nil {
		s.out.Failures = Blame(s.out.Exits, cfg.RootCauseWindow)
		if len(s.out.Failures) == 0 { // cannot happen: the first failure is always a candidate
			s.out.Failures = []WorkerExit{*s.failed}
		}
		s.out.Failure = &s.out.Failures[0]
	}
	return s.out, nil
}

// supervisor is Supervise's state: one goroutine (Supervise's) owns it.
type supervisor struct {
	cfg    SuperviseConfig
	ctx    context.Context
	events chan exitEvent
	procs  []*proc // the started workers; procs[i] is spec i
	done   []bool  // spec i has exited
	exited int
	out    *Outcome
	failed *WorkerExit // the first worker that failed on its own

	stopping bool
	grace    *time.Timer
	graceC   <-chan time.Time
	sigs     <-chan os.Signal
	lost     <-chan error
	ctxC     <-chan struct{}
	tick     <-chan time.Time // looks for silent workers (nil: Silence off)
}

func (s *supervisor) running() int { return len(s.procs) - s.exited }

// poll handles whatever has already happened, without blocking (while workers are being started).
func (s *supervisor) poll() {
	for {
		select {
		case ev := <-s.events:
			s.exit(ev)
		case sig := <-s.sigs:
			s.signal(sig)
		case err := <-s.lost:
			s.lostErr(err)
		case <-s.ctxC:
			s.ctxDone()
		default:
			return
		}
	}
}

// wait handles the next thing that happens.
func (s *supervisor) wait() {
	select {
	case ev := <-s.events:
		s.exit(ev)
	case sig := <-s.sigs:
		s.signal(sig)
	case err := <-s.lost:
		s.lostErr(err)
	case <-s.ctxC:
		s.ctxDone()
	case <-s.graceC:
		s.graceC = nil
		s.killAll()
	case now := <-s.tick:
		s.checkSilent(now)
	}
}

// checkSilent SIGKILLs every running worker whose heartbeats stopped for longer than Silence
// (a stopped process ignores SIGTERM until continued) and records why as its error line, at the
// time the silence began, so Blame takes it for the root: the other ranks' errors (their peer
// went away) come after. Its exit then stops the rest as any failure does.
func (s *supervisor) checkSilent(now time.Time) {
	for i, p := range s.procs {
		if s.done[i] {
			continue
		}
		p.mu.Lock()
		last, silent := p.lastBeat, p.silent
		p.mu.Unlock()
		if last.IsZero() || silent || now.Sub(last) <= s.cfg.Silence {
			continue
		}
		line := fmt.Sprintf("ddplaunch: rank %d sent no heartbeat for %s (stopped, e.g. by SIGSTOP, or hung): killed", p.spec.Rank, now.Sub(last).Round(100*time.Millisecond))
		p.mu.Lock()
		p.silent = true
		if p.errAt.IsZero() || p.errAt.After(last) {
			p.errAt, p.errLine = last, line
		}
		p.mu.Unlock()
		if p.spec.Sink != nil {
			p.spec.Sink.Line(Stderr, []byte(line))
		}
		p.signalGroup(syscall.SIGKILL)
	}
}

func (s *supervisor) exit(ev exitEvent) {
	s.exited++
	s.done[ev.idx] = true
	s.out.Exits[ev.idx] = ev.exit
	if ev.exit.Status.Failed() && !s.stopping {
		e := ev.exit
		s.failed = &e
		s.stop(syscall.SIGTERM)
	}
}

func (s *supervisor) signal(sig os.Signal) {
	if s.stopping {
		s.killAll()
		s.sigs = nil
		s.graceC = nil
		return
	}
	s.out.Signal = sig
	ss, ok := sig.(syscall.Signal)
	if !ok {
		ss = syscall.SIGTERM
	}
	s.stop(ss)
}

func (s *supervisor) lostErr(err error) {
	s.lost = nil
	if !s.stopping {
		s.out.Lost = err
		s.stop(syscall.SIGTERM)
	}
}

func (s *supervisor) ctxDone() {
	s.ctxC = nil
	if s.stopping {
		return
	}
	s.out.Ctx = s.ctx.Err()
	s.stop(syscall.SIGTERM)
}

// stop sends sig to every running worker and starts the grace period.
func (s *supervisor) stop(sig syscall.Signal) {
	s.stopping = true
	for i, p := range s.procs {
		if !s.done[i] {
			p.stopGroup(sig)
		}
	}
	s.grace = time.NewTimer(s.cfg.Grace)
	s.graceC = s.grace.C
}

func (s *supervisor) killAll() {
	for i, p := range s.procs {
		if !s.done[i] {
			p.signalGroup(syscall.SIGKILL)
			s.out.Killed = append(s.out.Killed, p.spec.Rank)
		}
	}
}

// startWorker starts one worker and the goroutines that read its output and wait for it; the
// waiter sends exactly one event on events.
func startWorker(idx int, s WorkerSpec, cfg SuperviseConfig, events chan<- exitEvent) (*proc, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	hbR, hbW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, err
	}
	cmd := exec.Command(s.Path, s.Args...)
	// The heartbeat pipe's write end follows the caller's files: fd 3+len(ExtraFiles).
	cmd.Env = append(append([]string(nil), s.Env...), fmt.Sprintf("%s=%d", EnvHeartbeatFD, 3+len(s.ExtraFiles)))
	cmd.Dir = s.Dir
	cmd.ExtraFiles = append(append([]*os.File(nil), s.ExtraFiles...), hbW)
	cmd.Stdout = outW // *os.File: passed to the child as is, no copying goroutine in os/exec
	cmd.Stderr = errW
	cmd.SysProcAttr = workerSysProcAttr()
	err = cmd.Start()
	outW.Close() // the child holds its own copies
	errW.Close()
	hbW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		hbR.Close()
		return nil, err
	}
	p := &proc{spec: s, cmd: cmd, pgid: cmd.Process.Pid, tail: newTail(cfg.TailLines)}
	var pumps sync.WaitGroup
	pumps.Add(1)
	go func() { // heartbeats, until the worker (and any child holding the pipe) is gone
		defer pumps.Done()
		var b [64]byte
		for {
			n, err := hbR.Read(b[:])
			if n > 0 {
				p.beat(time.Now())
			}
			if err != nil {
				return
			}
		}
	}()
	prog := filepath.Base(s.Path)

	for _, r := range []struct {
		f  *os.File
		st Stream
	}{{outR, Stdout}, {errR, Stderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pumpLines(r.f, func(line []byte) {
				if r.st == Stderr && IsErrorLine(line, prog) {
					p.noteError(line)
				}
				p.tail.add(line)
				if s.Sink != nil {
					s.Sink.Line(r.st, line)
				}
			})
		}()
	}

	go func() {
		cmd.Wait() //nolint:errcheck // the status is in ProcessState
		exited := time.Now()
		p.mu.Lock()
		// Kill what the worker left in its group before marking it reaped. The group id stays
		// taken while a member lives, so this cannot hit an unrelated group.
		syscall.Kill(-p.pgid, syscall.SIGKILL) //nolint:errcheck
		p.reaped = true
		p.mu.Unlock()

		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		t := time.NewTimer(cfg.Drain)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
		outR.Close() // unblocks a reader held up by an escaped grandchild
		errR.Close()
		hbR.Close()
		<-drained
		p.mu.Lock()
		errAt, errLine, stopped := p.errAt, p.errLine, !p.stoppedAt.IsZero() && !p.stoppedAt.After(exited)
		p.mu.Unlock()
		events <- exitEvent{idx: idx, exit: WorkerExit{
			Rank: s.Rank, LocalRank: s.LocalRank, Pid: p.pgid, Started: true,
			Status: statusOf(cmd.ProcessState), Tail: p.tail.get(), Exited: exited,
			ErrorAt: errAt, ErrorLine: errLine, Stopped: stopped, Program: prog,
		}}
	}()
	return p, nil
}
