package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	Status          ExitStatus
	Tail            []string // its last output lines (both streams, in arrival order)
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
}

// Outcome is how a supervised group ended. At most one of Failure, Signal, Lost and Ctx is set;
// none is set when every worker exited 0.
type Outcome struct {
	Exits   []WorkerExit // one per WorkerSpec, in the same order
	Failure *WorkerExit  // the first worker that failed on its own (not while being stopped)
	Signal  os.Signal    // the launcher's signal that stopped the workers
	Lost    error        // the error from SuperviseConfig.Lost that stopped the workers
	Ctx     error        // ctx's error when its end stopped the workers
	Killed  []int        // ranks whose process group got SIGKILL after the grace period
}

// Succeeded reports whether every worker exited 0 with no stop requested.
func (o *Outcome) Succeeded() bool {
	return o.Failure == nil && o.Signal == nil && o.Lost == nil && o.Ctx == nil
}

// proc is a started worker.
type proc struct {
	spec WorkerSpec
	cmd  *exec.Cmd
	pgid int
	tail *tail

	mu     sync.Mutex
	reaped bool // Wait returned: the pid may be reused, never signal it again
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

type exitEvent struct {
	idx  int
	exit WorkerExit
}

// Supervise starts one process per spec, each in its own process group, and watches them until
// all have exited:
//
//  1. All exit 0: Outcome.Succeeded().
//  2. One exits non-zero or dies by a signal: it is Outcome.Failure; every other worker gets
//     SIGTERM, then SIGKILL after cfg.Grace.
//  3. A signal arrives on cfg.Signals, cfg.Lost delivers, or ctx ends: the same stop sequence
//     (with the received signal, else SIGTERM), recorded in the Outcome.
//
// Whenever a worker exits, its process group is SIGKILLed, so no grandchild outlives it. Supervise
// returns only after every worker has been reaped and every goroutine it started has ended. The
// error is non-nil only when a worker could not be started; the ones already started are killed
// and reaped first.
func Supervise(ctx context.Context, specs []WorkerSpec, cfg SuperviseConfig) (*Outcome, error) {
	if len(specs) == 0 {
		return nil, errors.New("launcher: no workers to supervise")
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 2 * time.Second
	}
	events := make(chan exitEvent, len(specs))
	procs := make([]*proc, 0, len(specs))
	out := &Outcome{Exits: make([]WorkerExit, len(specs))}

	for i, s := range specs {
		p, err := startWorker(i, s, cfg, events)
		if err != nil {
			for _, q := range procs {
				q.signalGroup(syscall.SIGKILL)
			}
			for range procs {
				<-events
			}
			return nil, fmt.Errorf("launcher: start rank %d (%s): %w", s.Rank, s.Path, err)
		}
		procs = append(procs, p)
	}

	running := len(procs)
	done := make([]bool, len(procs))
	stopping := false
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	stop := func(sig syscall.Signal) {
		stopping = true
		for i, p := range procs {
			if !done[i] {
				p.signalGroup(sig)
			}
		}
		grace = time.NewTimer(cfg.Grace)
		graceC = grace.C
	}
	killAll := func() {
		for i, p := range procs {
			if !done[i] {
				p.signalGroup(syscall.SIGKILL)
				out.Killed = append(out.Killed, p.spec.Rank)
			}
		}
	}
	ctxDone := ctx.Done()
	sigs := cfg.Signals
	lost := cfg.Lost

	for running > 0 {
		select {
		case ev := <-events:
			running--
			done[ev.idx] = true
			out.Exits[ev.idx] = ev.exit
			if ev.exit.Status.Failed() && !stopping {
				e := ev.exit
				out.Failure = &e
				stop(syscall.SIGTERM)
			}
		case sig := <-sigs:
			if stopping {
				killAll()
				sigs = nil
				graceC = nil
				continue
			}
			out.Signal = sig
			s, ok := sig.(syscall.Signal)
			if !ok {
				s = syscall.SIGTERM
			}
			stop(s)
		case err := <-lost:
			lost = nil
			if !stopping {
				out.Lost = err
				stop(syscall.SIGTERM)
			}
		case <-ctxDone:
			ctxDone = nil
			if !stopping {
				out.Ctx = ctx.Err()
				stop(syscall.SIGTERM)
			}
		case <-graceC:
			graceC = nil
			killAll()
		}
	}
	return out, nil
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
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	cmd.Dir = s.Dir
	cmd.ExtraFiles = s.ExtraFiles
	cmd.Stdout = outW // *os.File: passed to the child as is, no copying goroutine in os/exec
	cmd.Stderr = errW
	cmd.SysProcAttr = workerSysProcAttr()
	err = cmd.Start()
	outW.Close() // the child holds its own copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	p := &proc{spec: s, cmd: cmd, pgid: cmd.Process.Pid, tail: newTail(cfg.TailLines)}

	var pumps sync.WaitGroup
	for _, r := range []struct {
		f  *os.File
		st Stream
	}{{outR, Stdout}, {errR, Stderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pumpLines(r.f, func(line []byte) {
				p.tail.add(line)
				if s.Sink != nil {
					s.Sink.Line(r.st, line)
				}
			})
		}()
	}

	go func() {
		cmd.Wait() //nolint:errcheck // the status is in ProcessState
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
		<-drained
		events <- exitEvent{idx: idx, exit: WorkerExit{
			Rank: s.Rank, LocalRank: s.LocalRank, Pid: p.pgid,
			Status: statusOf(cmd.ProcessState), Tail: p.tail.get(),
		}}
	}()
	return p, nil
}
