package observe

import (
	"go/build"
	"testing"
)

// Arrows point one way (doc.go): the trainer imports this package, never the reverse, and
// observation does not depend on persistence.
func TestImports_notWorkerNorCheckpoint(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if imp == "github.com/goddp/goddp/worker" || imp == "github.com/goddp/goddp/worker/checkpoint" {
			t.Errorf("worker/observe imports %s", imp)
		}
	}
}
