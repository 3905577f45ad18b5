package harness_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	{"tests/harness", "Need", []string{"need", "skipUnless", "requireOrSkip"}},
	{"tests/harness", "NeedRoot", []string{"needRoot", "requireRoot", "skipUnlessRoot", "skipIfNotRoot"}},
	{"tests/harness", "NeedCgroupV1", []string{"needCgroupV1", "requireCgroupV1", "skipOnCgroupV2"}},
	{"tests/harness", "Shared", []string{"shared", "sharedDir", "sharedPath"}},
	{"tools/localstack", "FreeAddress", []string{"freePort", "freeAddr", "freeAddress"}},
	{"tests/testregistry", "New", []string{"privateRegistry"}},
}

// runfilesEnv are the variables Bazel locates runfiles by: code reading one
// outside tests/harness is a runfiles lookup written again, whatever its
// name (use harness.Runfile, Binary or Source).
var runfilesEnv = map[string]bool{"TEST_SRCDIR": true, "TEST_WORKSPACE": true, "RUNFILES_DIR": true, "RUNFILES_MANIFEST_FILE": true}

// TestOneDefinitionPerHelper walks the repository's Go sources and fails
// when a shared test helper is written a second time: a function named like
// one, or code that reads the runfiles variables.
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
			case *ast.CallExpr:
				if name := runfilesRead(n); name != "" && dir != "tests/harness" {
					t.Errorf("%s: reads %s, a runfiles lookup written again; use tests/harness.Runfile, Binary or Source", fset.Position(n.Pos()), name)
				}
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

// runfilesRead is the runfiles variable call reads (os.Getenv or
// os.LookupEnv of one of runfilesEnv), or "".
func runfilesRead(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) != 1 || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
		return ""
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "os" {
		return ""
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	name, err := strconv.Unquote(lit.Value)
	if err != nil || !runfilesEnv[name] {
		return ""
	}
	return name
}

// A renamed runfiles lookup is caught by what it reads.
func TestRunfilesReadIsFound(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{`os.Getenv("TEST_SRCDIR")`, "TEST_SRCDIR"},
		{`os.LookupEnv("RUNFILES_DIR")`, "RUNFILES_DIR"},
		{`os.Getenv("HOME")`, ""},
		{`env.Getenv("TEST_SRCDIR")`, ""},
	} {
		e, err := parser.ParseExpr(tc.src)
		require.NoError(t, err)
		assert.Equal(t, tc.want, runfilesRead(e.(*ast.CallExpr)), tc.src)
	}
}

// needChildEnv makes TestNeed, in the test binary TestNeed runs again, call
// Need itself: with an error when "missing", with none when "present".
const needChildEnv = "FNRUNNER_HARNESS_NEED_CHILD"

// TestNeed runs this test binary again and reads what Need made of the
// child's TestNeed: a skip, with its line on stderr (where it reaches Bazel's
// test.log, with or without -v) for tools/bazel's list; a failure instead
// under RequireAllEnv=1; nothing when nothing is missing.
func TestNeed(t *testing.T) {
	switch os.Getenv(needChildEnv) {
	case "missing":
		harness.Need(t, "the thing", errors.New("this machine lacks it"))
		t.Fatal("Need returned on an error")
	case "present":
		harness.Need(t, "the thing", nil)
		return
	}
	self, err := os.Executable()
	require.NoError(t, err)
	const line = "FNRUNNER_SKIPPED TestNeed: the thing not checked: this machine lacks it\n"
	for _, tc := range []struct {
		name, child, requireAll string
		// verdict is go test's -v line for the child's TestNeed.
		verdict string
		// fails: the child exits non-zero, naming what it did not check.
		fails bool
		// listed: the child wrote line to stderr.
		listed bool
	}{
		{name: "missing", child: "missing", verdict: "--- SKIP: TestNeed", listed: true},
		{name: "missing, everything required", child: "missing", requireAll: "1", verdict: "--- FAIL: TestNeed", fails: true},
		{name: "present", child: "present", verdict: "--- PASS: TestNeed"},
		{name: "present, everything required", child: "present", requireAll: "1", verdict: "--- PASS: TestNeed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(self, "-test.run=^TestNeed$", "-test.v")
			// Later entries win: this run's own RequireAllEnv is replaced.
			cmd.Env = append(os.Environ(), needChildEnv+"="+tc.child, harness.RequireAllEnv+"="+tc.requireAll)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			if tc.fails {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "stdout:\n%s\nstderr:\n%s", stdout, stderr.String())
				assert.Contains(t, string(stdout), "the thing not checked: this machine lacks it (FNRUNNER_REQUIRE_ALL=1")
			} else {
				require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr.String())
			}
			assert.Contains(t, string(stdout), tc.verdict)
			if tc.listed {
				assert.Contains(t, stderr.String(), line)
			} else {
				assert.NotContains(t, stderr.String(), "FNRUNNER_SKIPPED")
			}
		})
	}
}
