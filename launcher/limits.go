package launcher

import (
	"fmt"
	"runtime"
)

// MaxWorkersPerCPU is the most workers per CPU that Run starts without Options.Oversubscribe
// (ddplaunch --oversubscribe).
//
// The rule, and why: a data-parallel worker keeps at least one CPU busy (the training loop, and
// on a GPU the thread feeding it), so past one worker per CPU more workers only share the same
// CPUs; 4 per CPU leaves room for deliberate sharing (tests, several small workers per GPU, one
// worker per GPU on a host with fewer cores than GPUs) while a count beyond it is a typo or an
// attack, not a plan: --nproc-per-node 100000 would start 100000 processes, each with its own
// memory, before the first one noticed anything. MPI refuses more ranks than slots the same way
// (mpirun --oversubscribe). The CPUs are those this process may run on (runtime.NumCPU reads the
// affinity mask, so taskset and cgroup cpusets count; a CFS quota does not).
const MaxWorkersPerCPU = 4

// HostLimits is what bounds the number of workers one host can hold. ThisHost reads this host's.
type HostLimits struct {
	// CPUs is the number of CPUs this process may run on (runtime.NumCPU).
	CPUs int
	// NProc is RLIMIT_NPROC's soft limit: how many processes (threads, in fact) the user may have;
	// 0 when it is unlimited or not enforced (root).
	NProc uint64
}

// ThisHost returns the limits of the host the launcher runs on.
func ThisHost() HostLimits {
	return HostLimits{CPUs: runtime.NumCPU(), NProc: nprocLimit()}
}

// MaxWorkers is the most workers h holds without oversubscription: MaxWorkersPerCPU × CPUs.
func (h HostLimits) MaxWorkers() int { return MaxWorkersPerCPU * max(h.CPUs, 1) }

// CheckNProc refuses n workers per host when h cannot hold them:
//
//   - more than RLIMIT_NPROC: the kernel would refuse the processes beyond it anyway (fork fails
//     with EAGAIN), so none is started; no flag lifts this;
//   - more than h.MaxWorkers() (MaxWorkersPerCPU per CPU), unless oversubscribe is set.
//
// The errors are *ConfigError, naming --nproc-per-node and the way out.
func CheckNProc(n int, h HostLimits, oversubscribe bool) error {
	if n < 1 {
		return &ConfigError{Err: fmt.Errorf("--nproc-per-node %d: want at least 1", n)}
	}
	if h.NProc > 0 && uint64(n) >= h.NProc {
		return &ConfigError{Err: fmt.Errorf("--nproc-per-node %d: this user may have at most %d processes (RLIMIT_NPROC, `ulimit -u`), "+
			"and the launcher and the workers' own threads count too; raise the limit or start fewer workers", n, h.NProc)}
	}
	if !oversubscribe && n > h.MaxWorkers() {
		return &ConfigError{Err: fmt.Errorf("--nproc-per-node %d: more than %d workers per CPU on this host's %d CPU(s) (at most %d); "+
			"past that they only share CPUs and memory (pass --oversubscribe to start them anyway)",
			n, MaxWorkersPerCPU, h.CPUs, h.MaxWorkers())}
	}
	return nil
}

// ConfigError is an error in what the launcher was asked to do (flags, Options), found before any
// worker started. The launcher exits 2 for it, as for a usage error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "launcher: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ExitCode is 2: a usage or configuration error.
func (e *ConfigError) ExitCode() int { return ExitUsage }

// Exit codes of ddplaunch (see ExitCode). A worker's own exit code passes through unchanged, so
// 1 and 2 can also come from a worker; the report on stderr says which.
const (
	ExitOK          = 0   // every worker exited 0
	ExitFailure     = 1   // the launcher failed: rendezvous timeout, a lost host, a refused restart, ...
	ExitUsage       = 2   // usage or configuration error: nothing was started
	ExitNoExec      = 126 // the program exists but could not be executed (as a shell says)
	ExitNotFound    = 127 // the program was not found (as a shell says)
	ExitSignalsBase = 128 // 128+N: a worker was killed by signal N, or the launcher was stopped by it
)
