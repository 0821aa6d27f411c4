package half

import (
	"go/build"
	"strings"
	"testing"
)

// The package is a leaf that both model and allreduce import (the f16 wire and the f16 tensors
// agree on one conversion): it imports nothing of goddp, so allreduce links nothing else of
// model through it.
func TestLeaf_importsNothingOfGoddp(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if strings.HasPrefix(imp, "github.com/goddp/goddp") {
			t.Errorf("model/half imports %s", imp)
		}
	}
}
