package launcher

import (
	"regexp"
	"sort"
	"syscall"
	"time"
)

// Which worker to blame. When one worker fails, the others usually fail too, a moment later and
// because of it: their peer went away (a broken ring, a rendezvous that lost its master), or the
// launcher stopped them. The first worker to exit is not always the one whose failure began first:
// with a bad data.path, rank 0 fails while it reads the data, closes its rendezvous server on the
// way out and prints its error last, so rank 1 exits first with "rendezvous ...: EOF". Blame
// looks past that, with what the launcher sees of each worker: when it exited, when it wrote its
// first error line on stderr, what that line says, and whether the launcher had stopped it.

// DefaultRootCauseWindow is SuperviseConfig.RootCauseWindow's default: a failure that begins
// (first error line, else exit) more than this long after the first failed exit is a consequence,
// never the root cause. Two seconds covers a worker that is slow to print while it tears down its
// connections, and is still short against the grace period in which the others are stopped.
const DefaultRootCauseWindow = 2 * time.Second

// Blame returns the failed workers among exits that may be the root failure of a group that
// stopped because of a failure, the most likely first. The candidates are every started worker
// that failed and whose failure was not the launcher stopping it (killed by a signal, or exit code
// 128+SIGTERM or 128+SIGINT, after the stop signal was sent), provided its failure began (ErrorAt,
// else Exited) at most window after the first failed exit. They are ordered by:
//
//  1. failures of their own before follow-ons (IsFollowOn: the error says a peer went away or the
//     worker was cancelled);
//  2. the earliest beginning of the failure: the first error line, else the exit;
//  3. the earliest exit;
//  4. the lowest rank.
//
// It is a pure function of exits; Supervise calls it once every worker has exited.
func Blame(exits []WorkerExit, window time.Duration) []WorkerExit {
	var first time.Time
	for _, e := range exits {
		if e.Started && e.Status.Failed() && !stoppedByLauncher(e) && (first.IsZero() || e.Exited.Before(first)) {
			first = e.Exited
		}
	}
	if first.IsZero() {
		return nil
	}
	var c []WorkerExit
	for _, e := range exits {
		if !e.Started || !e.Status.Failed() || stoppedByLauncher(e) {
			continue
		}
		if failureBegan(e).After(first.Add(window)) {
			continue
		}
		c = append(c, e)
	}
	sort.SliceStable(c, func(i, j int) bool {
		a, b := c[i], c[j]
		if fa, fb := IsFollowOn(a), IsFollowOn(b); fa != fb {
			return !fa
		}
		if ba, bb := failureBegan(a), failureBegan(b); !ba.Equal(bb) {
			return ba.Before(bb)
		}
		if !a.Exited.Equal(b.Exited) {
			return a.Exited.Before(b.Exited)
		}
		return a.Rank < b.Rank
	})
	return c
}

// failureBegan is when e's failure began as far as the launcher can tell: its first error line,
// or its exit when it wrote none (or exited first).
func failureBegan(e WorkerExit) time.Time {
	if !e.ErrorAt.IsZero() && e.ErrorAt.Before(e.Exited) {
		return e.ErrorAt
	}
	return e.Exited
}

// stoppedByLauncher says e's end is what the launcher's stop did to it: after the stop signal it
// died by a signal, or exited as a shell's trap does for SIGTERM (143) or SIGINT (130).
func stoppedByLauncher(e WorkerExit) bool {
	if !e.Stopped {
		return false
	}
	st := e.Status
	return st.Signal != 0 || st.Code == ExitSignalsBase+int(syscall.SIGTERM) || st.Code == ExitSignalsBase+int(syscall.SIGINT)
}

// errorLine matches the usual first lines of a failure: slog's ERROR level (text and JSON), Go's
// panic and fatal error, a Python traceback, and lines that begin with an error word.
var errorLine = regexp.MustCompile(`level=ERROR|"level":"ERROR"|^(panic: |fatal error: |Traceback \(most recent call last\)|(?i:error|fatal|critical)\b)`)

// IsErrorLine says whether line (from a worker's stderr) reports an error: besides errorLine's
// forms, the Unix form of a fatal message, "PROGRAM: message", where prog is the base name of
// the worker's program (ddptrain ends with "ddptrain: <error>").
func IsErrorLine(line []byte, prog string) bool {
	return FatalLine(line, prog) || errorLine.Match(line)
}

// followOn matches what a worker of another program than goddp's trainer says when it fails
// because another one did: a peer closed or reset its connection (gRPC's Unavailable and
// Canceled), a rendezvous that lost its master or its peers, a send or receive abandoned, a peer
// reported by another rank, or its own cancellation (the launcher's SIGTERM). Not a bare EOF: a
// worker's own failure says it as often ("truncated header (want 16 bytes): EOF", issue 30).
var followOn = regexp.MustCompile(`(?i)closed by peer|connection (reset|refused|closed)|broken pipe|` +
	`code = (Unavailable|Canceled)|context canceled|rendezvous|(send|receive) abandoned|no progress for|` +
	`reported by rank|peer (went away|is gone|died|closed)|membership lost`)

// Trainer is the base name of goddp's trainer, whose exit code says what kind its failure is.
const Trainer = "ddptrain"

// ExitFollowOn is the exit code with which goddp's trainer (Trainer) says its failure is
// another's: a collective or a link failed because of a named peer, the rendezvous lost its
// master, or a stop signal ended it. Any other failure of the trainer is its own.
const ExitFollowOn = 4

// ExitMasterPortTaken is the exit code with which goddp's trainer, as rank 0, says it could not
// listen on MASTER_ADDR:MASTER_PORT because another process holds that address: the port was
// free when drawn (FreePort) and taken before rank 0 bound it. Run then starts the same workers
// on another port without counting a restart, when it drew the port itself (masterPortTaken).
const ExitMasterPortTaken = 5

// MaxPortRedraws bounds how many attempts of one job Run starts again on a new port because the
// drawn one was taken (ExitMasterPortTaken); past it the failure counts as any other.
const MaxPortRedraws = 3

// masterPortTaken says whether an attempt failed only because the master port Run drew for it was
// taken: a single-host job whose port is drawn per attempt (LocalRendezvous with Port 0) and whose
// root-cause worker is goddp's trainer exiting ExitMasterPortTaken. A port the user chose
// (--master-port) is theirs to change; multi-host rendezvous agree on their attempts across hosts
// and are left to --max-restarts.
func masterPortTaken(r Rendezvous, f *WorkerExit) bool {
	lr, ok := r.(*LocalRendezvous)
	return ok && f != nil && lr.Port == 0 && f.Program == Trainer && f.Status.Signal == 0 && f.Status.Code == ExitMasterPortTaken
}

// IsFollowOn says whether e's failure is a consequence of another worker's. goddp's trainer
// says so by its exit code (ExitFollowOn), and only by it; any other program by its words: its
// first error line or its last output line (where a Go program's fatal message and a Python
// exception end up) matches followOn.
func IsFollowOn(e WorkerExit) bool {
	if e.Program == Trainer {
		return e.Status.Signal == 0 && e.Status.Code == ExitFollowOn
	}
	if e.ErrorLine != "" && followOn.MatchString(e.ErrorLine) {
		return true
	}
	return len(e.Tail) > 0 && followOn.MatchString(e.Tail[len(e.Tail)-1])
}
