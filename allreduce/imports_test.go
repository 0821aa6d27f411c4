package allreduce

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The layout's rules (doc.go), checked on every package under allreduce/ (test files aside):
// the contract, link, imports nothing of goddp; a plane imports link and auth at most, never
// the core nor another plane; and nothing under allreduce/ imports anything of model but the
// half-float leaf.
func TestImports_layout(t *testing.T) {
	const mod = "github.com/goddp/goddp/"
	allowed := map[string][]string{
		"allreduce/link":       {},
		"allreduce/auth":       {"allreduce/link"},
		"allreduce/rendezvous": {"allreduce/link", "allreduce/auth"},
		"allreduce/grpcnet":    {"allreduce/link", "allreduce/auth"},
		"allreduce/tcpnet":     {"allreduce/link", "allreduce/auth"},
		"allreduce/shm":        {"allreduce/link"},
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		pkg := filepath.ToSlash(filepath.Join("allreduce", path))
		seen[pkg] = true
		for _, imp := range p.Imports {
			rel, ours := strings.CutPrefix(imp, mod)
			if !ours {
				continue
			}
			if strings.HasPrefix(rel, "model/") && rel != "model/half" {
				t.Errorf("%s imports %s: allreduce knows nothing of model but the half-float leaf", pkg, imp)
			}
			if want, plane := allowed[pkg]; plane && !slices.Contains(want, rel) {
				t.Errorf("%s imports %s; it may import only %v of goddp", pkg, imp, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range allowed {
		if !seen[pkg] {
			t.Errorf("package %s not found: the rules name a package that moved", pkg)
		}
	}
}
