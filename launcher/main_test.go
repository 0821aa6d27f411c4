package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the worker program: with GODDP_TEST_WORKER set it runs a fake
// worker instead of the tests.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv("GODDP_TEST_WORKER"); ok {
		fakeWorker()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeWorker runs the comma-separated actions of $GODDP_TEST_WORKER_R<RANK> (or, when that is
// unset, $GODDP_TEST_WORKER) in order, then exits 0. Files go to $GODDP_TEST_DIR, named
// <what>-<rank>-<restart count>. Actions:
//
//	env            print "env K=V" for the launcher's variables (and CUDA_VISIBLE_DEVICES,
//	               OMP_NUM_THREADS), sorted
//	echo:T         print T on stdout          echoerr:T  print T on stderr
//	noeol:T        print T on stdout with no newline
//	lines:N        print "line 0" .. "line N-1"
//	pid            write my pid to pid-*
//	grandchild     start `sleep 1000` (in my process group) and write its pid to gc-*
//	ignoreterm     ignore SIGTERM and SIGINT
//	trapterm       on SIGTERM/SIGINT write the signal's name to term-* and exit 143
//	progress       write "progress from rank R" to fd $DDP_PROGRESS_FD if set
//	ready          write ready-* (after everything before it is in place)
//	await:W-R      wait (up to 30s) until rank R has written W-R-<my restart count>
//	sleep:D        sleep for time.Duration D
//	exit:N         exit with N
//	beat           heartbeat every 100 ms on $DDP_HEARTBEAT_FD
//	kill:N         kill myself with signal N
//	failfirst:N    exit with N when DDP_RESTART_COUNT is 0
//	failonce:N     exit with N the first time this rank runs in the job (a marker file)
//	errorfile:T    write T to $TORCHELASTIC_ERROR_FILE as PyTorch's @record writes an exception
func fakeWorker() {
	rank := os.Getenv("RANK")
	actions := os.Getenv("GODDP_TEST_WORKER")
	if a, ok := os.LookupEnv("GODDP_TEST_WORKER_R" + rank); ok {
		actions = a
	}
	dir := os.Getenv("GODDP_TEST_DIR")
	file := func(what string) string {
		return filepath.Join(dir, what+"-"+rank+"-"+os.Getenv("DDP_RESTART_COUNT"))
	}
	write := func(what, content string) {
		p := file(what)
		if err := os.WriteFile(p+".tmp", []byte(content), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fake worker:", err)
			os.Exit(99)
		}
		os.Rename(p+".tmp", p)
	}
	for _, a := range strings.Split(actions, ",") {
		verb, arg, _ := strings.Cut(a, ":")
		switch verb {
		case "env":
			var kv []string
			for _, e := range os.Environ() {
				k, _, _ := strings.Cut(e, "=")
				if managedVars[k] || k == "CUDA_VISIBLE_DEVICES" || k == EnvOMPNumThreads {
					kv = append(kv, e)
				}
			}
			sort.Strings(kv)
			for _, e := range kv {
				fmt.Println("env " + e)
			}
		case "echo":
			fmt.Println(arg)
		case "echoerr":
			fmt.Fprintln(os.Stderr, arg)
		case "noeol":
			fmt.Print(arg)
		case "lines":
			n, _ := strconv.Atoi(arg)
			for i := 0; i < n; i++ {
				fmt.Printf("line %d\n", i)
			}
		case "pid":
			write("pid", strconv.Itoa(os.Getpid()))
		case "grandchild":
			c := exec.Command("sleep", "1000")
			if err := c.Start(); err != nil {
				os.Exit(98)
			}
			write("gc", strconv.Itoa(c.Process.Pid))
		case "ignoreterm":
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		case "trapterm":
			c := make(chan os.Signal, 1)
			signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
			go func() {
				s := <-c
				write("term", s.String())
				os.Exit(143)
			}()
		case "progress":
			if fd, err := strconv.Atoi(os.Getenv("DDP_PROGRESS_FD")); err == nil {
				f := os.NewFile(uintptr(fd), "progress")
				fmt.Fprintf(f, "progress from rank %s\n", rank)
				f.Close()
			}
		case "ready":
			write("ready", "")
		case "await":
			p := filepath.Join(dir, arg+"-"+os.Getenv("DDP_RESTART_COUNT"))
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(p); err == nil {
					break
				}
			}
		case "sleep":
			d, _ := time.ParseDuration(arg)
			time.Sleep(d)
		case "exit":
			n, _ := strconv.Atoi(arg)
			os.Exit(n)
		case "beat": // heartbeats every 100 ms on $DDP_HEARTBEAT_FD, as the trainer does each second
			if fd, err := strconv.Atoi(os.Getenv("DDP_HEARTBEAT_FD")); err == nil {
				f := os.NewFile(uintptr(fd), "heartbeat")
				go func() {
					for {
						if _, err := f.Write([]byte{1}); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
		case "kill":
			n, _ := strconv.Atoi(arg)
			syscall.Kill(os.Getpid(), syscall.Signal(n))
			time.Sleep(10 * time.Second)
		case "errorfile":
			doc := fmt.Sprintf(`{"message": {"message": %q, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}`, arg)
			if err := os.WriteFile(os.Getenv(EnvTorchelasticErrorFile), []byte(doc), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "fake worker:", err)
				os.Exit(96)
			}
		case "failfirst":
			if os.Getenv("DDP_RESTART_COUNT") == "0" {
				n, _ := strconv.Atoi(arg)
				os.Exit(n)
			}
		case "failonce": // the first time this rank runs in the job, whatever its restart count
			p := filepath.Join(dir, "failedonce-"+rank)
			if _, err := os.Stat(p); err != nil {
				os.WriteFile(p, nil, 0o644)
				n, _ := strconv.Atoi(arg)
				os.Exit(n)
			}
		case "":
		default:
			fmt.Fprintln(os.Stderr, "fake worker: unknown action", a)
			os.Exit(97)
		}
	}
}

// fakeJob is the common setup of tests that run fake workers.
type fakeJob struct {
	t      *testing.T
	dir    string
	self   string
	stdout *lockedBuffer
	stderr *lockedBuffer
}

func newFakeJob(t *testing.T) *fakeJob {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &fakeJob{t: t, dir: t.TempDir(), self: self, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
}

// env returns a base environment running actions on every rank, with per-rank overrides
// ("R1" → actions).
func (j *fakeJob) env(actions string, perRank map[int]string) []string {
	// A -race binary sleeps 1s at exit by default (GORACE atexit_sleep_ms); fake workers need not.
	env := append(os.Environ(), "GODDP_TEST_WORKER="+actions, "GODDP_TEST_DIR="+j.dir, "GORACE=atexit_sleep_ms=0")
	for r, a := range perRank {
		env = append(env, fmt.Sprintf("GODDP_TEST_WORKER_R%d=%s", r, a))
	}
	return env
}

// options returns Options for n fake workers.
func (j *fakeJob) options(n int, actions string, perRank map[int]string) Options {
	return Options{
		NProcPerNode: n,
		Program:      j.self,
		Args:         []string{"-test.run=^$"},
		Env:          j.env(actions, perRank),
		Grace:        5 * time.Second,
		Stdout:       j.stdout,
		Stderr:       j.stderr,
	}
}

func (j *fakeJob) path(what string, rank, restart int) string {
	return filepath.Join(j.dir, fmt.Sprintf("%s-%d-%d", what, rank, restart))
}

// waitFile waits for a file a fake worker writes and returns its content.
func (j *fakeJob) waitFile(what string, rank, restart int) string {
	j.t.Helper()
	p := j.path(what, rank, restart)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(p)
		if err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("no %s after 30s; stderr so far:\n%s", p, j.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (j *fakeJob) pid(what string, rank, restart int) int {
	j.t.Helper()
	n, err := strconv.Atoi(j.waitFile(what, rank, restart))
	if err != nil {
		j.t.Fatal(err)
	}
	return n
}

// assertGone fails unless pid is dead: no such process, or a zombie (dead, waiting for a parent
// that is not us: in a container, PID 1 may never reap the orphans it inherits).
func assertGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) || isZombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s (pid %d) still alive (kill 0: %v)", what, pid, err)
			syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the buffer's lines.
func (l *lockedBuffer) lines() []string {
	return strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
}
