package data

import (
	"os"
	"path/filepath"
	"testing"
)

// $GOMODCACHE is searched first, with the module path escaped as the Go command does.
func TestDefaultPath_mnistFromTheModuleCache(t *testing.T) {
	cache := t.TempDir()
	want := filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@"+gomnistVersion, "data")
	if err := os.MkdirAll(want, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMODCACHE", cache)
	if got, err := DefaultPath("mnist"); err != nil || got != want {
		t.Errorf("DefaultPath(mnist) = %q, %v; want %q", got, err, want)
	}
}

func TestDefaultPath_textAndOthers(t *testing.T) {
	p, err := DefaultPath("text")
	if err != nil {
		t.Skipf("no Go toolchain tree here: %v", err)
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() || filepath.Base(p) != "Isaac.Newton-Opticks.txt" {
		t.Errorf("DefaultPath(text) = %q (%v)", p, err)
	}
	if p, err := DefaultPath("imagenet"); p != "" || err != nil {
		t.Errorf("DefaultPath(imagenet) = %q, %v; want no default", p, err)
	}
}
