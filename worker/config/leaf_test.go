package config

import (
	"go/build"
	"strings"
	"testing"
)

// The package is a leaf (doc.go): the standard library and yaml.v3, so that ddplaunch can check a
// config without linking the trainer (model, ddp, allreduce).
func TestLeaf_importsStdlibAndYAMLOnly(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") && imp != "gopkg.in/yaml.v3" {
			t.Errorf("worker/config imports %s", imp)
		}
	}
}
