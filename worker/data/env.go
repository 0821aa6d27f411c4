package data

// env.go: the package's one reader of environment variables.

import (
	"os"
	"path/filepath"
)

// moduleCaches are the directories the Go module cache may be in: $GOMODCACHE, each
// $GOPATH/pkg/mod, and ~/go/pkg/mod, in that order.
func moduleCaches() []string {
	var out []string
	if m := os.Getenv("GOMODCACHE"); m != "" {
		out = append(out, m)
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, p := range filepath.SplitList(gp) {
			out = append(out, filepath.Join(p, "pkg", "mod"))
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(h, "go", "pkg", "mod"))
	}
	return out
}
