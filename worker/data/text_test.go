package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadText(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.txt")
	body := "abcdefghijklmnopqrstuvwxyz0123456789" // 36 bytes
	os.WriteFile(p, []byte(body), 0o644)
	train, eval, err := LoadText(p, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	if string(train.Bytes) != body[:27] || string(eval.Bytes) != body[27:] {
		t.Fatalf("split %q | %q", train.Bytes, eval.Bytes)
	}
	ds := train.WithContext(4)
	if ds.Len() != (27-1)/4 {
		t.Fatalf("Len = %d, want 6", ds.Len())
	}
	b := newBatch(ds.Layout(), 2, HeapAllocator{})
	ds.Fill(b, []int{0, 5})
	want := func(s string) []int32 {
		out := make([]int32, len(s))
		for i := range s {
			out[i] = int32(s[i])
		}
		return out
	}
	if got, w := b.Tokens[:8], want("abcduvwx"); !equalI32(got, w) {
		t.Errorf("tokens %v want %v", got, w)
	}
	if got, w := b.Targets[:8], want("bcdevwxy"); !equalI32(got, w) {
		t.Errorf("targets %v want %v", got, w)
	}
	// Every byte but the last is an input exactly once per epoch (up to the
	// tail shorter than T).
	ev := eval.WithContext(4)
	if ev.Len() != 2 {
		t.Errorf("eval windows %d, want 2", ev.Len())
	}
	if _, _, err := LoadText(filepath.Join(t.TempDir(), "nope.txt"), 0.1); err == nil || !strings.Contains(err.Error(), "nope.txt") {
		t.Errorf("missing file: %v", err)
	}
}

func equalI32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
