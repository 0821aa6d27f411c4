package worker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// kindSwitchAllowed are the functions that may ask which kind a model is, by file: the one
// config→spec translation. Everything else (the loop, eval, inputs, the sampler) asks the model
// (model.Input, TargetsPerSample, Classifier) instead. The config's validation (worker/config)
// checks keys per kind, which is its job, and is not scanned.
var kindSwitchAllowed = map[string]map[string]bool{
	"worker/build.go": {"ModelSpec": true},
}

// modelKindNames are the spellings of a model kind: the config's and the spec's constants, and
// their strings.
var modelKindNames = map[string]bool{
	"ModelGPT": true, "ModelMLP": true, "ModelResNet": true,
	"SpecKindGPT": true, "SpecKindMLP": true, "SpecKindResNet": true,
}

// isModelKind reports whether e names a model's kind: x.Kind for any x but a data section
// (cfg.Data.Kind chooses the data set, which stays), a kind constant, or a kind's string.
func isModelKind(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.SelectorExpr:
		if modelKindNames[e.Sel.Name] {
			return true
		}
		if e.Sel.Name != "Kind" {
			return false
		}
		if x, ok := e.X.(*ast.SelectorExpr); ok && x.Sel.Name == "Data" {
			return false
		}
		return true
	case *ast.Ident:
		return modelKindNames[e.Name]
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return false
		}
		s, err := strconv.Unquote(e.Value)
		return err == nil && (s == "gpt" || s == "mlp" || s == "resnet")
	case *ast.CallExpr: // config.ModelKind("gpt")
		return len(e.Args) == 1 && isModelKind(e.Args[0])
	}
	return false
}

// kindSwitches lists, as "file:line in func", every place of src that compares or switches on
// a model's kind outside the allowed functions.
func kindSwitches(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, d := range f.Decls {
		fn := "" // top-level var and const declarations: no function
		if fd, ok := d.(*ast.FuncDecl); ok {
			fn = fd.Name.Name
		}
		if kindSwitchAllowed[name][fn] {
			continue
		}
		report := func(n ast.Node) {
			found = append(found, fset.Position(n.Pos()).String()+" in "+fn)
		}
		ast.Inspect(d, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isModelKind(n.X) || isModelKind(n.Y)) {
					report(n)
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && isModelKind(n.Tag) {
					report(n)
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if isModelKind(e) {
						report(e)
						break
					}
				}
			}
			return true
		})
	}
	return found, nil
}

// TestNoModelKindSwitch holds issue 28's rule: the worker and ddptrain never switch on the
// model's kind, but in ModelSpec; they ask the model what they need.
func TestNoModelKindSwitch(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../cmd/ddptrain"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	scanned := 0
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		name := filepath.ToSlash(filepath.Join("worker", p)) // worker/loop.go, cmd/ddptrain/main.go
		if strings.HasPrefix(p, "..") {
			name = strings.TrimPrefix(filepath.ToSlash(p), "../")
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		found, err := kindSwitches(token.NewFileSet(), name, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s: switches on the model's kind; ask the model (Input, TargetsPerSample, Classifier) or its spec instead", f)
		}
		scanned++
	}
	if scanned < 10 {
		t.Fatalf("scanned %d files: the test has lost its way", scanned)
	}
}

// TestNoModelKindSwitchCatches checks the checker: a kind switch added to the loop is found.
func TestNoModelKindSwitchCatches(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{`package worker
func (t *Trainer) f() int { if t.cfg.Model.Kind == "gpt" { return 1 }; return 0 }`, 1},
		{`package worker
func f(cfg *Config) { switch cfg.Model.Kind { case config.ModelGPT: } }`, 2},
		{`package worker
func f(s model.Spec) bool { return s.Kind != model.SpecKindResNet }`, 1},
		{`package worker
func f(cfg *Config) bool { return cfg.Data.Kind == "mnist" }`, 0},
		{`package worker
func f(m model.Model) bool { return m.Classifier() }`, 0},
	} {
		found, err := kindSwitches(token.NewFileSet(), "worker/loop.go", c.src)
		if err != nil {
			t.Fatal(err)
		}
		if len(found) != c.want {
			t.Errorf("%q: found %v, want %d", c.src, found, c.want)
		}
	}
	found, err := kindSwitches(token.NewFileSet(), "worker/build.go", `package worker
func ModelSpec(cfg *Config) { switch cfg.Model.Kind { case "gpt": } }`)
	if err != nil || len(found) != 0 {
		t.Errorf("ModelSpec: found %v (%v), want none", found, err)
	}
}
