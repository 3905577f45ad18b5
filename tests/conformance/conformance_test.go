// Conformance: every case of the KRM catalog corpus (../shared/krm-corpus
// and ../shared/krm-corpus-next/examples, see CORPUS.md there) and of this
// package's testdata (starlark cases in the same format; their expected
// diffs are made by hand from the function's documentation, but for
// comments-kept's, which is what kpt's own render library gave through
// porch's path: starlark drops every comment and sorts every map, and kpt
// restores both from its input after each function), rendered
// (`kpt fn render`) or evaluated (`kpt fn eval`: testType eval, or an
// exec.sh running kpt fn eval) through the gateway by two clients (fnctl's
// library and porch's path, see renderPath), once with the go
// executor and once with the binary executor, must give the expected exit
// code, package diff and results.
package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
)

// mapImage names the image the corpus names as fnrunner serves it: under
// the same tag when fnrunner claims it (claimed), else under the version
// fnrunner ships.
func mapImage(image string) string {
	name := image[strings.LastIndex(image, "/")+1:]
	name, tag, _ := strings.Cut(name, ":")
	if slices.Contains(claimed[name], tag) {
		return name + ":" + tag
	}
	if v, ok := versions[name]; ok {
		return name + ":" + v
	}
	return image
}

// corpora are ../shared/krm-corpus and ../shared/krm-corpus-next/examples
// beside the repository.
func corpora(t *testing.T) []string {
	t.Helper()
	shared := filepath.Join(harness.Workspace(t), "..", "shared")
	dirs := []string{filepath.Join(shared, "krm-corpus"), filepath.Join(shared, "krm-corpus-next", "examples")}
	for i, env := range []string{"FNRUNNER_KRM_CORPUS", "FNRUNNER_KRM_CORPUS_NEXT"} {
		if dir := os.Getenv(env); dir != "" {
			dirs[i] = dir
		}
	}
	return dirs
}

// cases are the directories below root with an .expected directory.
func cases(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".expected" {
			out = append(out, filepath.Dir(p))
			return filepath.SkipDir
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(out)
	return out
}

type expectedConfig struct {
	TestType string            `yaml:"testType"`
	ExitCode int               `yaml:"exitCode"`
	RunCount int               `yaml:"runCount"`
	Image    string            `yaml:"image"`
	Args     map[string]string `yaml:"args"`
	FnConfig string            `yaml:"fnConfig"`
}

func TestCorpus(t *testing.T) {
	type corpusCase struct{ name, dir string }
	var all []corpusCase
	for _, root := range corpora(t) {
		if _, err := os.Stat(root); err != nil {
			// A run without the corpus has checked nothing: it says so
			// (and fails under FNRUNNER_REQUIRE_ALL=1, as in CI).
			harness.Need(t, "KRM corpus conformance", fmt.Errorf("put shared/ beside the repository (CI has it; a fresh clone does not) or set FNRUNNER_KRM_CORPUS and FNRUNNER_KRM_CORPUS_NEXT: %w", err))
		}
		found := cases(t, root)
		require.NotEmpty(t, found, "no cases under %s", root)
		for _, dir := range found {
			rel, _ := filepath.Rel(filepath.Dir(root), dir)
			all = append(all, corpusCase{rel, dir})
		}
	}
	own, err := filepath.Abs("testdata")
	require.NoError(t, err)
	ownCases := cases(t, own)
	require.NotEmpty(t, ownCases, "no cases under %s", own)
	for _, dir := range ownCases {
		all = append(all, corpusCase{"testdata/" + filepath.Base(dir), dir})
	}
	for _, executor := range []struct{ name, disable string }{{"go", "binary,pod"}, {"binary", "go,pod"}} {
		t.Run(executor.name, func(t *testing.T) {
			s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=" + executor.disable}})
			for _, c := range all {
				t.Run(c.name, func(t *testing.T) { runCase(t, s, c.dir, fnctlPath) })
				t.Run("porch/"+c.name, func(t *testing.T) { runCase(t, s, c.dir, porchPath) })
			}
		})
	}
}

// The two clients a case runs through: libs/kptrender (fnctl render, and
// fnctl eval DIR for eval cases), and porch's path (tools/porchrender: kpt's kptops with porch's gRPC
// function runtime, which porch users take, and for eval cases kpt's own fn
// eval command with the call carried by porch's client).
type renderPath int

const (
	fnctlPath renderPath = iota
	porchPath
)

// porchRender renders pkg through tools/porchrender against the gateway.
func porchRender(t *testing.T, s *stack.Stack, pkg string) *kptrender.ResultList {
	t.Helper()
	args := []string{"--address", s.GatewayAddress}
	// The images of every Kptfile of the package tree.
	mapped := map[string]bool{}
	err := filepath.WalkDir(pkg, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "Kptfile" {
			return err
		}
		kf, err := kptrender.ReadKptfile(filepath.Dir(p))
		if err != nil {
			return err
		}
		for _, f := range append(kf.Pipeline.Mutators, kf.Pipeline.Validators...) {
			if to := mapImage(f.Image); to != f.Image && !mapped[f.Image] {
				mapped[f.Image] = true
				args = append(args, "--map-image", f.Image+"="+to)
			}
		}
		return nil
	})
	require.NoError(t, err)
	return porchrender(t, append(args, pkg)...)
}

// porchEval evaluates the case's function on pkg through `porchrender eval`
// against the gateway: kpt's own fn eval command, the call carried by
// porch's client (porch has no eval of its own). The arguments go to kpt as
// a case's `kpt fn eval … -- KEY=VALUE` would, and kpt makes the ConfigMap.
func porchEval(t *testing.T, s *stack.Stack, pkg string, e *evalCase) *kptrender.ResultList {
	t.Helper()
	args := []string{"eval", "--address", s.GatewayAddress, "--image", e.image, "--map-image", e.image + "=" + mapImage(e.image)}
	if e.fnConfig != "" {
		args = append(args, "--fn-config", filepath.Join(pkg, e.fnConfig))
	}
	args = append(args, pkg)
	if list := e.argList(); len(list) > 0 {
		args = append(append(args, "--"), list...)
	}
	return porchrender(t, args...)
}

// porchrender runs tools/porchrender and reads the result list it prints.
func porchrender(t *testing.T, args ...string) *kptrender.ResultList {
	t.Helper()
	cmd := exec.Command(harness.Binary(t, "FNRUNNER_PORCHRENDER"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var xe *exec.ExitError
	// Exit code 1: the render or eval failed (a function, or kpt refused
	// what one returned); the result list is then printed, and the case says whether
	// it expects a failure. Anything else is the harness's or porchrender's.
	if err != nil && !(errors.As(err, &xe) && xe.ExitCode() == 1) {
		require.NoError(t, err, "porchrender: %s", stderr.String())
	}
	var list kptrender.ResultList
	require.NoError(t, yaml.Unmarshal(out, &list), "porchrender's result list: %s\n%s", out, stderr.String())
	if err != nil {
		// A function failed (the list says so), or kpt refused the package
		// or a function's output: an error, as kptrender.Render's.
		require.Equal(t, 1, list.ExitCode, "porchrender failed, no function did: %s", stderr.String())
		t.Logf("porchrender: a function failed: %s", stderr.String())
	}
	return &list
}

func runCase(t *testing.T, s *stack.Stack, src string, path renderPath) {
	var cfg expectedConfig
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "config.yaml")); err == nil {
		require.NoError(t, yaml.Unmarshal(data, &cfg))
	}
	script, _ := os.ReadFile(filepath.Join(src, ".expected", "exec.sh"))
	eval, err := evalOf(src, cfg, string(script))
	require.NoError(t, err)
	if eval == nil && cfg.TestType != "" && cfg.TestType != "render" {
		t.Fatalf("testType %q is not run by this harness", cfg.TestType)
	}
	if cfg.RunCount == 0 {
		cfg.RunCount = 1
	}

	pkg := filepath.Join(t.TempDir(), filepath.Base(src))
	copyDir(t, src, pkg)
	git(t, pkg, "init", "-q")
	git(t, pkg, "add", "-A")
	git(t, pkg, "commit", "-q", "-m", "original")
	if strings.Contains(string(script), "kpt pkg init") {
		pkgInit(t, pkg)
	}

	var list *kptrender.ResultList
	for i := 0; i < cfg.RunCount; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		switch {
		case path == porchPath && eval != nil:
			list = porchEval(t, s, pkg, eval)
		case path == porchPath:
			list = porchRender(t, s, pkg)
		case eval != nil:
			var config *yaml.RNode
			if config, err = eval.config(pkg); err == nil {
				list, err = kptrender.Eval(ctx, pkg, s.Client(), eval.image, config, kptrender.Options{MapImage: mapImage})
			}
		default:
			list, err = kptrender.Render(ctx, pkg, s.Client(), kptrender.Options{MapImage: mapImage})
		}
		cancel()
		require.NoError(t, err, "run %d", i+1)
	}
	assert.Equal(t, cfg.ExitCode, list.ExitCode, "exit code; results: %+v", list.Items)

	git(t, pkg, "add", "-A")
	got := git(t, pkg, "diff", "--cached")
	want := ""
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "diff.patch")); err == nil {
		want = string(data)
	}
	assert.Equal(t, strings.TrimSpace(want), strings.TrimSpace(got), "package diff differs")

	if data, err := os.ReadFile(filepath.Join(src, ".expected", "results.yaml")); err == nil {
		var exp kptrender.ResultList
		require.NoError(t, yaml.Unmarshal(data, &exp))
		compareResults(t, list, &exp, path)
	}
}

// evalCase is a `kpt fn eval` case: its image and its functionConfig, from
// key/value arguments or a file of the package.
type evalCase struct {
	image    string
	args     map[string]string
	fnConfig string // relative to the package
}

// evalOf finds the kpt fn eval of a case: testType eval in its
// .expected/config.yaml, or a `kpt fn eval` command line in its exec.sh;
// nil if it has none.
func evalOf(src string, cfg expectedConfig, script string) (*evalCase, error) {
	if cfg.TestType == "eval" {
		e := &evalCase{image: cfg.Image, args: cfg.Args}
		if cfg.FnConfig != "" {
			// Relative to .expected, where config.yaml is.
			abs := filepath.Join(src, ".expected", cfg.FnConfig)
			rel, err := filepath.Rel(src, abs)
			if err != nil || strings.HasPrefix(rel, "..") {
				return nil, fmt.Errorf("fnConfig %q is not in the package", cfg.FnConfig)
			}
			e.fnConfig = rel
		}
		return e, nil
	}
	// Backslash-newlines join a command's lines.
	var found *evalCase
	for _, line := range strings.Split(strings.ReplaceAll(script, "\\\n", " "), "\n") {
		words, err := shellWords(line)
		if err != nil {
			return nil, fmt.Errorf("exec.sh: %w", err)
		}
		if len(words) < 3 || words[0] != "kpt" || words[1] != "fn" || words[2] != "eval" {
			continue
		}
		e := &evalCase{args: map[string]string{}}
		for i := 3; i < len(words); i++ {
			switch w := words[i]; {
			case w == "--image" && i+1 < len(words):
				e.image = words[i+1]
				i++
			case strings.HasPrefix(w, "--image="):
				e.image = strings.TrimPrefix(w, "--image=")
			case w == "--image-pull-policy" && i+1 < len(words):
				// Nothing is pulled: the gateway runs what it has.
				i++
			case strings.HasPrefix(w, "--image-pull-policy="):
			case w == "--":
				for _, kv := range words[i+1:] {
					k, v, _ := strings.Cut(kv, "=")
					e.args[k] = v
				}
				i = len(words)
			default:
				// A flag this harness does not do would be a case run
				// differently from kpt's, passing or failing for nothing.
				return nil, fmt.Errorf("exec.sh: kpt fn eval %q is not supported by this harness: %q", w, line)
			}
		}
		if e.image == "" {
			return nil, fmt.Errorf("exec.sh: kpt fn eval without --image: %q", line)
		}
		if found != nil {
			return nil, fmt.Errorf("exec.sh: more than one kpt fn eval: %q", line)
		}
		found = e
	}
	return found, nil
}

// config is the case's functionConfig for the package copied to pkg.
func (e *evalCase) config(pkg string) (*yaml.RNode, error) {
	if e.fnConfig != "" {
		data, err := os.ReadFile(filepath.Join(pkg, e.fnConfig))
		if err != nil {
			return nil, err
		}
		return yaml.Parse(string(data))
	}
	return kptrender.EvalConfig(e.argList())
}

// argList is the case's arguments as kpt fn eval gets them after --,
// KEY=VALUE in key order.
func (e *evalCase) argList() []string {
	keys := make([]string, 0, len(e.args))
	for k := range e.args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	list := make([]string, 0, len(keys))
	for _, k := range keys {
		list = append(list, k+"="+e.args[k])
	}
	return list
}

// shellWords splits a shell command line into words, with single and
// double quotes (no expansion) and backslash escapes; a # starts a comment.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			i++
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// compareResults compares what kpt prints, loosely: stderr is runtime-specific
// and file.index is kpt's bookkeeping. Porch keeps no results of a function
// that failed (its grpcRunner returns the call's error and drops the
// response, porch v1.5.8 pkg/engine/grpcruntime.go), so on its path a
// failed item's results are not compared.
func compareResults(t *testing.T, got, want *kptrender.ResultList, path renderPath) {
	t.Helper()
	require.Equal(t, want.ExitCode, got.ExitCode, "result list: exit code")
	require.Len(t, got.Items, len(want.Items), "result list: items")
	for i := range want.Items {
		g, w := got.Items[i], want.Items[i]
		assert.Equal(t, w.Image, g.Image, "item %d: image", i)
		assert.Equal(t, w.ExitCode, g.ExitCode, "item %d: %s exit code", i, g.Image)
		if path == porchPath && w.ExitCode != 0 {
			continue
		}
		assert.Equal(t, normalize(w.Results), normalize(g.Results), "item %d results", i)
	}
}

func normalize(rs framework.Results) []string {
	var out []string
	for _, r := range rs {
		s := string(r.Severity) + "|" + r.Message
		if ref := r.ResourceRef; ref != nil && (ref.Kind != "" || ref.Name != "") {
			s += "|" + ref.APIVersion + "/" + ref.Kind + "/" + ref.Namespace + "/" + ref.Name
		}
		if r.Field != nil && r.Field.Path != "" {
			s += "|field=" + r.Field.Path
		}
		if r.File != nil && r.File.Path != "" {
			s += "|file=" + r.File.Path
		}
		out = append(out, s)
	}
	return out
}

// pkgInit does what `kpt pkg init` does to an existing package: it adds the
// package context ConfigMap if there is none.
func pkgInit(t *testing.T, pkg string) {
	t.Helper()
	path := filepath.Join(pkg, "package-context.yaml")
	if _, err := os.Stat(path); err == nil {
		return
	}
	kf, err := kptrender.ReadKptfile(pkg)
	require.NoError(t, err)
	content := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kptfile.kpt.dev\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ndata:\n  name: " + kf.Metadata.Name + "\n"
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel == ".expected" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	require.NoError(t, err)
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=fnrunner", "-c", "user.email=test@fnrunner.invalid", "-c", "core.autocrlf=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v\n%s", args, out)
	return string(out)
}

func TestEvalOf(t *testing.T) {
	script := "#! /bin/bash\n\n# shellcheck disable=SC2016\nkpt fn eval --image gcr.io/kpt-fn/search-replace:unstable --image-pull-policy never -- \\\nby-path='data.**' by-value-regex='(.*)nginx.com(.*)' put-comment='kpt-set: ${1}${host}${2}'\n"
	e, err := evalOf("/pkg", expectedConfig{}, script)
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, "gcr.io/kpt-fn/search-replace:unstable", e.image)
	assert.Equal(t, map[string]string{"by-path": "data.**", "by-value-regex": "(.*)nginx.com(.*)", "put-comment": "kpt-set: ${1}${host}${2}"}, e.args)

	e, err = evalOf("/pkg", expectedConfig{}, "kpt pkg init\n")
	require.NoError(t, err)
	assert.Nil(t, e, "no kpt fn eval: a render case")

	e, err = evalOf("/pkg", expectedConfig{TestType: "eval", Image: "upsert-resource:unstable", FnConfig: "../fn-config.yaml"}, "")
	require.NoError(t, err)
	assert.Equal(t, "fn-config.yaml", e.fnConfig)
	_, err = evalOf("/pkg", expectedConfig{TestType: "eval", FnConfig: "../../outside.yaml"}, "")
	assert.Error(t, err, "a functionConfig outside the package")

	for name, script := range map[string]string{
		"a flag kpt has and the harness does not": "kpt fn eval --image set-labels:v0.2.1 --match-kind Deployment -- app=web\n",
		"two evals": "kpt fn eval --image set-labels:v0.2.1 -- a=b\nkpt fn eval --image set-labels:v0.2.1 -- c=d\n",
		"no image":  "kpt fn eval -- a=b\n",
	} {
		_, err = evalOf("/pkg", expectedConfig{}, script)
		assert.Error(t, err, name)
	}

	_, err = shellWords("a 'b")
	assert.Error(t, err)
}
