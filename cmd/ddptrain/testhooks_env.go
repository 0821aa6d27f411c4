//go:build ddptesthooks

package main

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/goddp/goddp/worker"
)

// The tests' fault injection, compiled only into a binary built with -tags ddptesthooks (the
// end-to-end tests build theirs so; `make build` does not, so a shipped ddptrain has no way to
// fail on purpose). testhooks_off.go is its stand-in.

// errInjectedFault is the failure DDP_FAIL_AT_STEP plants.
var errInjectedFault = errors.New("failing on purpose (DDP_FAIL_AT_STEP)")

// testHooks turns the fault-injection variables of the tests into the trainer's hooks:
//
//	DDP_FAIL_AT_STEP=N        the first attempt (DDP_RESTART_COUNT 0) fails just before step N:
//	                          the run stops, closes what it opened, and ddptrain exits 3
//	DDP_KILL_AT_STEP=N        rank DDP_KILL_RANK (default 0) of the first attempt SIGKILLs itself
//	                          just before step N: a rank killed, nothing closed, its peers left
//	                          waiting in a collective
//	DDP_SLOW_CHECKPOINT=D     every checkpoint write waits D (a Go duration) before it starts:
//	                          a disk slower than checkpoint.every (issue 30)
//	DDP_INJECT_INF_STEP=N     rank DDP_INJECT_INF_RANK (default 0) puts +Inf into a gradient at
//	                          step N, after the all-reduce (the loss scaler must skip the step
//	                          on every rank; under bf16 the run stops, naming step and rank)
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
	if n := envInt("DDP_KILL_AT_STEP"); n > 0 && envInt("DDP_RESTART_COUNT") == 0 && envInt("RANK") == envInt("DDP_KILL_RANK") {
		opt.FaultHook = func(step int) error {
			if step == n {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return nil
		}
	}
	if d, err := time.ParseDuration(os.Getenv("DDP_SLOW_CHECKPOINT")); err == nil && d > 0 {
		opt.SlowCheckpoint = func(int) { time.Sleep(d) }
	}
	if n := envInt("DDP_INJECT_INF_STEP"); n > 0 {
		rank, at := envInt("RANK"), envInt("DDP_INJECT_INF_RANK")
		opt.InjectInf = func(step int) bool { return step == n && rank == at }
	}
}

// injectedFault reports whether err is the one DDP_FAIL_AT_STEP planted (ddptrain exits 3).
func injectedFault(err error) bool { return errors.Is(err, errInjectedFault) }
