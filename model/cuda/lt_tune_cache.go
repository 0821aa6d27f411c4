package cuda

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// lt_tune_cache.go: GODDP_LT_TUNE's choices kept on disk, one file per GPU model beside the
// compiled kernels, so that every run on a machine takes the algorithm the first run timed best:
// timing alone may choose differently from run to run where two candidates time alike, and a
// run's bits would then differ from the last one's. A plan's line holds the chosen candidate's
// index among the heuristic's results, how many results there were and the plan (its shape,
// types, layouts and alignments, no addresses); a line whose count no longer matches what the
// heuristic offers (another cuBLAS) is timed again. Deleting the file times everything again.
// The file is an optimisation: unreadable lines are ignored, a failed write is not an error, and
// two processes tuning at once may each keep only their own new lines (the other's are timed
// again by a later run). Apart from the cgo so that it is tested everywhere.

// ltTuneCachePath is the file for GPU model device under dir (KernelCacheDir).
func ltTuneCachePath(dir, device string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, device)
	return filepath.Join(dir, "lt-tune-"+name+".txt")
}

// ltTuneChoice is a plan's kept choice: candidate Index of Count offered.
type ltTuneChoice struct{ Index, Count int }

// readLTTuneCache reads the choices in path by plan key; a missing file is an empty cache.
func readLTTuneCache(path string) map[string]ltTuneChoice {
	m := map[string]ltTuneChoice{}
	b, err := os.ReadFile(path)
	if err != nil {
		return m
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		i, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || i < 0 || n < 1 || i >= n || f[2] == "" {
			continue
		}
		m[f[2]] = ltTuneChoice{i, n}
	}
	return m
}

// ltTuneCached returns the kept choice of plan key among count candidates, if path has one for
// that count.
func ltTuneCached(path, key string, count int) (int, bool) {
	c, ok := readLTTuneCache(path)[key]
	if !ok || c.Count != count {
		return 0, false
	}
	return c.Index, true
}

// storeLTTuneChoice adds (or replaces) plan key's choice in path: the file as it is now read
// again, the line set, written to a temporary file and renamed over it.
func storeLTTuneChoice(path, key string, c ltTuneChoice) error {
	if strings.ContainsAny(key, "\n") || c.Index < 0 || c.Index >= c.Count {
		return fmt.Errorf("cuda: lt tune cache: bad entry %q %+v", key, c)
	}
	m := readLTTuneCache(path)
	m[key] = c
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteString("# goddp GODDP_LT_TUNE: candidate index, candidates offered, cublasLt plan\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%d %d %s\n", m[k].Index, m[k].Count, k)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
