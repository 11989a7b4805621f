package pdkv

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestExportedIdentifiersAreDocumented keeps `go doc` (the package's API reference) complete:
// every exported function, type, method, constant and variable of the package has a doc
// comment (a constant or variable may share its group's comment or carry a line comment).
func TestExportedIdentifiersAreDocumented(t *testing.T) {
	fset := token.NewFileSet()
	notTest := func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTest, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	astPkg, ok := pkgs["pdkv"]
	if !ok {
		t.Fatalf("package pdkv not found (got %v)", pkgs)
	}
	p := doc.New(astPkg, "github.com/pdkv/pdkv/go", 0)
	if strings.TrimSpace(p.Doc) == "" {
		t.Error("the package has no doc comment")
	}
	missing := func(kind, name, text string) {
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s %s has no doc comment", kind, name)
		}
	}
	values := func(kind string, vs []*doc.Value) {
		for _, v := range vs {
			if strings.TrimSpace(v.Doc) != "" {
				continue
			}
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if n.IsExported() && vs.Doc == nil && vs.Comment == nil {
						t.Errorf("%s %s has no doc comment (nor its group)", kind, n.Name)
					}
				}
			}
		}
	}
	values("const", p.Consts)
	values("var", p.Vars)
	for _, f := range p.Funcs {
		missing("func", f.Name, f.Doc)
	}
	for _, typ := range p.Types {
		missing("type", typ.Name, typ.Doc)
		values("const", typ.Consts)
		values("var", typ.Vars)
		for _, f := range typ.Funcs {
			missing("func", f.Name, f.Doc)
		}
		for _, m := range typ.Methods {
			missing("method", typ.Name+"."+m.Name, m.Doc)
		}
	}
}
