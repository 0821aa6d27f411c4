package launcher

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Stream names a worker's output stream.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// MaxLine is the longest line handed to a LineSink; a longer one arrives in MaxLine pieces.
const MaxLine = 64 << 10

// LineSink receives each line a worker writes, without its trailing newline; a last line without
// one is delivered at EOF. Line is called concurrently from the stdout and stderr readers of one
// worker (and of several workers if a sink is shared), so implementations must be safe for
// concurrent use. line is only valid during the call.
type LineSink interface {
	Line(s Stream, line []byte)
}

// pumpLines reads r to EOF (or error) and hands each line to fn.
func pumpLines(r io.Reader, fn func([]byte)) {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] == '\n' {
				line = line[:len(line)-1]
			}
			fn(line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// SyncWriter serializes Writes to W, so that lines written by several workers' readers do not
// interleave. Share one per destination (one for stdout, one for stderr).
type SyncWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *SyncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}

// RankOutput is the LineSink of one worker: each line goes, as one Write, to Stdout or Stderr
// (following the stream it came on) prefixed "[rank N] ", and unprefixed to Log when Log is set
// and to OutLog or ErrLog (following its stream) when they are. A nil Stdout or Stderr keeps
// that stream off the console (--redirects, --local-ranks-filter).
type RankOutput struct {
	Rank   int
	Stdout io.Writer // shared *SyncWriter, or nil
	Stderr io.Writer // shared *SyncWriter, or nil
	Log    io.Writer // the rank's log file (rank-N.log), or nil; RankOutput serializes its writes
	// OutLog and ErrLog are this attempt's stdout.log and stderr.log in torchrun's layout
	// (LogLayout), or nil.
	OutLog, ErrLog io.Writer
	// Same, shared by an attempt's workers, keeps a fatal line (FatalLine: "PROG: message", Prog
	// the worker's program's base name) off the console when another rank printed the same one:
	// an error every rank meets (a data path missing on the host) is printed once, and the
	// failure report names the ranks. Logs still get every line. Nil: every line is printed.
	Same *SameLines
	Prog string

	mu sync.Mutex // guards Log, OutLog and ErrLog
}

var _ LineSink = (*RankOutput)(nil)

// Prefix returns the prefix of rank's lines.
func Prefix(rank int) string { return "[rank " + strconv.Itoa(rank) + "] " }

// Line implements LineSink.
func (o *RankOutput) Line(s Stream, line []byte) {
	p := Prefix(o.Rank)
	buf := make([]byte, 0, len(p)+len(line)+1)
	buf = append(append(append(buf, p...), line...), '\n')
	w := o.Stdout
	if s == Stderr {
		w = o.Stderr
	}
	if w != nil && !(s == Stderr && o.Same != nil && FatalLine(line, o.Prog) && o.Same.repeated(line, o.Rank)) {
		w.Write(buf) //nolint:errcheck // a closed terminal must not stop the job
	}
	sl := o.OutLog
	if s == Stderr {
		sl = o.ErrLog
	}
	if o.Log != nil || sl != nil {
		o.mu.Lock()
		if o.Log != nil {
			o.Log.Write(buf[len(p):]) //nolint:errcheck // as above; the log is best effort
		}
		if sl != nil {
			sl.Write(buf[len(p):]) //nolint:errcheck // as above
		}
		o.mu.Unlock()
	}
}

// tail keeps the last n lines it was given, in order. Safe for concurrent use.
type tail struct {
	mu    sync.Mutex
	lines []string
	next  int
	n     int
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) add(line []byte) {
	if t.n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) < t.n {
		t.lines = append(t.lines, string(line))
		return
	}
	t.lines[t.next] = string(line)
	t.next = (t.next + 1) % t.n
}

// get returns the kept lines, oldest first.
func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.lines))
	out = append(out, t.lines[t.next:]...)
	return append(out, t.lines[:t.next]...)
}

// openRankLog opens (appending) the log file of a rank under dir.
func openRankLog(dir string, rank int) (*os.File, error) {
	return os.OpenFile(RankLogPath(dir, rank), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// RankLogPath is where --log-dir keeps a rank's output: DIR/rank-N.log.
func RankLogPath(dir string, rank int) string {
	return filepath.Join(dir, "rank-"+strconv.Itoa(rank)+".log")
}

// FatalLine says whether line is a program's fatal message in the Unix form, "PROG: message",
// prog being the program's base name (how ddptrain ends: "ddptrain: <error>").
func FatalLine(line []byte, prog string) bool {
	return prog != "" && len(line) > len(prog) && line[len(prog)] == ':' && bytes.HasPrefix(line, []byte(prog))
}

// SameLines is the fatal lines an attempt's workers printed to the console, with the first rank
// that printed each. Safe for concurrent use; its zero value is ready.
type SameLines struct {
	mu    sync.Mutex
	first map[string]int
}

// maxSameLines bounds what SameLines remembers (a fatal line comes once per worker).
const maxSameLines = 1024

// repeated records that rank printed line and says whether another rank printed it first.
func (s *SameLines) repeated(line []byte, rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.first[string(line)]; ok {
		return r != rank
	}
	if s.first == nil {
		s.first = map[string]int{}
	}
	if len(s.first) < maxSameLines {
		s.first[string(line)] = rank
	}
	return false
}
