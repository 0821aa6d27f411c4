package launcher

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// torchrun's --log-dir layout, and its --redirects / --tee. With a log dir, every run gets its own
// directory, as torchrun makes it (tempfile.mkdtemp(prefix=run_id+"_", dir=log_dir)):
//
//	LOG_DIR/RUN_ID_xxxxxxxx/attempt_N/LOCAL_RANK/stdout.log   the worker's stdout, unprefixed
//	LOG_DIR/RUN_ID_xxxxxxxx/attempt_N/LOCAL_RANK/stderr.log   its stderr
//	LOG_DIR/RUN_ID_xxxxxxxx/attempt_N/LOCAL_RANK/error.json   TORCHELASTIC_ERROR_FILE: written by the
//	                                                          worker itself when it fails (PyTorch's @record)
//
// N is the restart count (attempt_0 first). goddp's own DIR/rank-N.log (every attempt of one global
// rank in one file, a header per attempt) is written beside it. torchrun writes stdout.log and
// stderr.log only for the streams --redirects or --tee name; ddplaunch writes both whenever there
// is a log dir (its --log-dir always kept the whole output), and --redirects decides only what
// leaves the console.

// Std names a worker's streams in a --redirects or --tee value, as torchrun's Std: 0 none, 1
// stdout, 2 stderr, 3 both.
type Std int

const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdAll  Std = 3
)

// Has says whether s covers the stream st.
func (s Std) Has(st Stream) bool {
	switch st {
	case Stdout:
		return s&StdOut != 0
	case Stderr:
		return s&StdErr != 0
	}
	return false
}

// StdSpec is a parsed --redirects or --tee value: one Std for every local rank ("3"), or one per
// local rank ("0:3,1:0"; a local rank it does not name gets StdNone). The zero value is "0".
type StdSpec struct {
	All   Std
	Ranks map[int]Std // nil: All applies to every local rank
}

var (
	stdValue   = regexp.MustCompile(`^[0-3]$`)
	stdMapping = regexp.MustCompile(`^[0-9]+:[0-3](,[0-9]+:[0-3])*$`)
)

// ParseStdSpec parses torchrun's forms: "0".."3", or "LOCAL_RANK:STD,..." ("0:3,1:0"). flag names
// the flag in errors.
func ParseStdSpec(flag, s string) (StdSpec, error) {
	s = strings.TrimSpace(s)
	switch {
	case stdValue.MatchString(s):
		return StdSpec{All: Std(s[0] - '0')}, nil
	case stdMapping.MatchString(s):
		sp := StdSpec{Ranks: map[int]Std{}}
		for _, m := range strings.Split(s, ",") {
			r, v, _ := strings.Cut(m, ":")
			lr, err := strconv.Atoi(r)
			if err != nil {
				return StdSpec{}, fmt.Errorf("%s %q: local rank %q", flag, s, r)
			}
			if _, dup := sp.Ranks[lr]; dup {
				return StdSpec{}, fmt.Errorf("%s %q: local rank %d given twice", flag, s, lr)
			}
			sp.Ranks[lr] = Std(v[0] - '0')
		}
		return sp, nil
	}
	return StdSpec{}, fmt.Errorf("%s %q: want 0 (none), 1 (stdout), 2 (stderr) or 3 (both), for every local rank, "+
		"or per local rank as LOCAL_RANK:N,... (e.g. 0:3,1:0)", flag, s)
}

// For is the Std of one local rank.
func (s StdSpec) For(localRank int) Std {
	if s.Ranks == nil {
		return s.All
	}
	return s.Ranks[localRank]
}

// IsZero says whether s covers no stream of any local rank.
func (s StdSpec) IsZero() bool {
	for _, v := range s.Ranks {
		if v != StdNone {
			return false
		}
	}
	return s.All == StdNone
}

// Check refuses local ranks at or above nproc (a typo, never a worker).
func (s StdSpec) Check(flag string, nproc int) error {
	for lr := range s.Ranks {
		if lr >= nproc {
			return fmt.Errorf("%s: local rank %d, but this host runs %d worker(s) (local ranks 0..%d)", flag, lr, nproc, nproc-1)
		}
	}
	return nil
}

// ToConsole says whether stream st of local rank lr goes to the console: not when --redirects
// sends it to the log files only, unless --tee also names it (torchrun: a tee'd stream is always
// written to the file and to the console).
func ToConsole(redirects, tee StdSpec, lr int, st Stream) bool {
	return !redirects.For(lr).Has(st) || tee.For(lr).Has(st)
}

// LogLayout is one run's directory in torchrun's --log-dir layout (the comment above).
type LogLayout struct {
	Dir string // LOG_DIR/RUN_ID_xxxxxxxx
}

// NewLogLayout creates base (if needed) and a fresh run directory in it, RUN_ID_ followed by a
// random suffix as torchrun's; a path separator in runID becomes "_".
func NewLogLayout(base, runID string) (LogLayout, error) {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return LogLayout{}, err
	}
	prefix := strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(runID)
	dir, err := os.MkdirTemp(base, prefix+"_")
	if err != nil {
		return LogLayout{}, err
	}
	os.Chmod(dir, 0o755) //nolint:errcheck // MkdirTemp makes it 0700; the logs are as readable as rank-N.log
	return LogLayout{Dir: dir}, nil
}

// RankDir is LOG_DIR/RUN_ID_x/attempt_N/LOCAL_RANK.
func (l LogLayout) RankDir(attempt, localRank int) string {
	return filepath.Join(l.Dir, "attempt_"+strconv.Itoa(attempt), strconv.Itoa(localRank))
}

// StdoutPath, StderrPath and ErrorFile are the three files of a rank's directory.
func (l LogLayout) StdoutPath(attempt, localRank int) string {
	return filepath.Join(l.RankDir(attempt, localRank), "stdout.log")
}

func (l LogLayout) StderrPath(attempt, localRank int) string {
	return filepath.Join(l.RankDir(attempt, localRank), "stderr.log")
}

func (l LogLayout) ErrorFile(attempt, localRank int) string {
	return filepath.Join(l.RankDir(attempt, localRank), "error.json")
}

// rankLogs are the open stdout.log and stderr.log of one worker's attempt.
type rankLogs struct{ out, err *os.File }

// openRankLogs makes the rank's directory and creates its two log files.
func (l LogLayout) openRankLogs(attempt, localRank int) (rankLogs, error) {
	if err := os.MkdirAll(l.RankDir(attempt, localRank), 0o755); err != nil {
		return rankLogs{}, err
	}
	out, err := os.OpenFile(l.StdoutPath(attempt, localRank), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return rankLogs{}, err
	}
	errf, err := os.OpenFile(l.StderrPath(attempt, localRank), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		out.Close()
		return rankLogs{}, err
	}
	return rankLogs{out: out, err: errf}, nil
}

func (r rankLogs) close() {
	if r.out != nil {
		r.out.Close()
		r.err.Close()
	}
}

// ReadErrorFile reads the error.json a worker wrote (torchelastic's format, as PyTorch's @record
// writes it: {"message": {"message": "Type: text", "extraInfo": {"py_callstack": ..., "timestamp":
// ...}}}; a plain string "message" is taken too) and returns its message; "" when there is no file
// or no message in it.
func ReadErrorFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var doc struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(b, &doc) != nil || len(doc.Message) == 0 {
		return ""
	}
	var nested struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(doc.Message, &nested) == nil && nested.Message != "" {
		return nested.Message
	}
	var flat string
	if json.Unmarshal(doc.Message, &flat) == nil {
		return flat
	}
	return ""
}
