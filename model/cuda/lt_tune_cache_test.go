package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tuner's kept choices: what one run stores the next reads; a count that no longer matches
// the heuristic's offer is a miss; stores keep the other plans' lines; bad lines are skipped.
func TestLTTuneCache(t *testing.T) {
	dir := t.TempDir()
	path := ltTuneCachePath(dir, "NVIDIA H100 80GB HBM3")
	if filepath.Base(path) != "lt-tune-NVIDIA_H100_80GB_HBM3.txt" {
		t.Errorf("path %s", path)
	}
	a, b := "{Epilogue:1 M:3072 N:16384 K:768}", "{Epilogue:512 M:768 N:768 K:16384}"
	if _, ok := ltTuneCached(path, a, 8); ok {
		t.Fatal("a choice in an empty cache")
	}
	if err := storeLTTuneChoice(path, a, ltTuneChoice{6, 8}); err != nil {
		t.Fatal(err)
	}
	if err := storeLTTuneChoice(path, b, ltTuneChoice{0, 8}); err != nil {
		t.Fatal(err)
	}
	if i, ok := ltTuneCached(path, a, 8); !ok || i != 6 {
		t.Errorf("a: %d %v, want 6", i, ok)
	}
	if i, ok := ltTuneCached(path, b, 8); !ok || i != 0 {
		t.Errorf("b: %d %v, want 0", i, ok)
	}
	if _, ok := ltTuneCached(path, a, 7); ok {
		t.Error("a choice among 8 read for an offer of 7")
	}
	if err := storeLTTuneChoice(path, a, ltTuneChoice{2, 7}); err != nil { // timed again: replaced
		t.Fatal(err)
	}
	if i, ok := ltTuneCached(path, a, 7); !ok || i != 2 {
		t.Errorf("a after the new offer: %d %v, want 2", i, ok)
	}
	if err := storeLTTuneChoice(path, "x\ny", ltTuneChoice{0, 1}); err == nil {
		t.Error("a key with a newline stored")
	}
	if err := storeLTTuneChoice(path, "c", ltTuneChoice{3, 3}); err == nil {
		t.Error("an index past the offer stored")
	}
	// A damaged file: its good lines still count, the rest are skipped.
	bad := "garbage\n9 8 past\n-1 8 neg\n1 x nan\n" + "3 8 " + b + "\n"
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	m := readLTTuneCache(path)
	if len(m) != 1 || m[b] != (ltTuneChoice{3, 8}) {
		t.Errorf("damaged file read as %v", m)
	}
	if err := storeLTTuneChoice(path, a, ltTuneChoice{1, 8}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(got), "#") || strings.Count(string(got), "\n") != 3 {
		t.Errorf("rewritten file:\n%s", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
