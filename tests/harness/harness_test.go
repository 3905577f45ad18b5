package harness_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// helpers are the test helpers with one home each: the function name in
// package dir. A function named like any of names (compared without case),
// defined anywhere else, top-level or as a local func literal, is a second
// definition.
var helpers = []struct {
	dir, name string
	names     []string
}{
	{"tests/harness", "WaitFor", []string{"waitFor"}},
	{"tests/harness", "Poll", []string{"poll", "wait", "eventually"}},
	{"tests/harness", "Runfile", []string{"runfile"}},
	{"tools/localstack", "FreeAddress", []string{"freePort", "freeAddr", "freeAddress"}},
	{"tests/testregistry", "New", []string{"privateRegistry"}},
}

// TestOneDefinitionPerHelper walks the repository's Go sources and fails
// when a shared test helper is written a second time.
func TestOneDefinitionPerHelper(t *testing.T) {
	root := harness.Workspace(t)
	owner := map[string]int{} // lower-case name → index in helpers
	for i, h := range helpers {
		for _, n := range h.names {
			owner[strings.ToLower(n)] = i
		}
	}
	homes := make([]int, len(helpers))
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "bazel-") ||
				d.Name() == "testdata" || d.Name() == "third_party") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		found := func(name *ast.Ident) {
			for i, h := range helpers {
				if dir == h.dir && name.Name == h.name {
					homes[i]++
					return
				}
			}
			i, ok := owner[strings.ToLower(name.Name)]
			if !ok {
				return
			}
			t.Errorf("%s: %s is defined again; use %s.%s", fset.Position(name.Pos()), name.Name, helpers[i].dir, helpers[i].name)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv == nil {
					found(n.Name)
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if _, ok := rhs.(*ast.FuncLit); ok && i < len(n.Lhs) {
						if id, ok := n.Lhs[i].(*ast.Ident); ok {
							found(id)
						}
					}
				}
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if _, ok := v.(*ast.FuncLit); ok && i < len(n.Names) {
						found(n.Names[i])
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	for i, h := range helpers {
		assert.Equal(t, 1, homes[i], "definitions of %s.%s, the helper's home", h.dir, h.name)
	}
}
