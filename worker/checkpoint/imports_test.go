package checkpoint

import (
	"go/build"
	"testing"
)

// Arrows point one way (doc.go): the trainer imports this package, never the reverse, and
// persistence does not depend on observation.
func TestImports_notWorkerNorObserve(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if imp == "github.com/goddp/goddp/worker" || imp == "github.com/goddp/goddp/worker/observe" {
			t.Errorf("worker/checkpoint imports %s", imp)
		}
	}
}
