package setlabels_test

// This file runs a KRM function in process on example packages of the kpt
// function catalog (fnrunner's corpus, see CORPUS.md beside it) the way kpt
// would, and compares the package it leaves with the package the case
// expects. It uses nothing else of its package, so that it can move to a
// shared test package as it is.
//
// A case is a package directory. A render case has a Kptfile whose first
// mutator gives the function's config (configMap or configPath) and its
// selectors and exclude; an eval case has an .expected/config.yaml with
// testType eval and args (a ConfigMap's data) or fnConfig. The expected
// package is the case with .expected/diff.patch applied (git apply).
//
// As kpt does, the function gets every resource of the package, the
// Kptfile and local config included, unless the mutator's selectors or
// exclude leave some out (kpt's semantics: a resource goes to the function
// when it matches one of the selectors, or there are none, and none of the
// exclusions); its output takes the place of what it was given. The call
// goes through kyaml's FunctionFilter, as in kpt, which gives the output
// back the comments and field order of its input.

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/fn/runtime/runtimeutil"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

const (
	// corpusEnv names the corpus's examples directory when set.
	corpusEnv = "FNRUNNER_KRM_CORPUS_NEXT"
	// defaultCorpus is the corpus's examples directory otherwise: in
	// shared/ beside the repository, from this package's directory (go test
	// runs there; under Bazel it is not found and the test skips).
	defaultCorpus = "../../../../../../shared/krm-corpus-next/examples"

	// expectedDir holds a case's expectations.
	expectedDir = ".expected"
	// kptResourceID marks each resource while a function with selectors
	// runs, so that its output can be put back in place (kpt's
	// annotation).
	kptResourceID = "internal.config.k8s.io/kpt-resource-id"
	// localConfig is kpt's annotation for resources that are not
	// deployed.
	localConfig = "config.kubernetes.io/local-config"
)

// corpusCase is one example package of the corpus.
type corpusCase struct {
	name string
	dir  string
}

// corpusCases returns the corpus's cases whose directory name starts with
// prefix, and skips t when the corpus is missing.
func corpusCases(t *testing.T, prefix string) []corpusCase {
	t.Helper()
	root := os.Getenv(corpusEnv)
	if root == "" {
		root = defaultCorpus
	}
	root, err := filepath.Abs(root)
	require.NoError(t, err)
	entries, err := os.ReadDir(root)
	if os.IsNotExist(err) {
		t.Skipf("KRM corpus %s is missing (set %s to its examples directory)", root, corpusEnv)
	}
	require.NoError(t, err)
	var cases []corpusCase
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			cases = append(cases, corpusCase{name: e.Name(), dir: filepath.Join(root, e.Name())})
		}
	}
	require.NotEmpty(t, cases, "no case in %s starts with %q", root, prefix)
	return cases
}

// caseConfig is a case's .expected/config.yaml.
type caseConfig struct {
	TestType string            `yaml:"testType"`
	ExitCode int               `yaml:"exitCode"`
	Args     map[string]string `yaml:"args"`
	FnConfig yaml.Node         `yaml:"fnConfig"`
}

// kptfile is the part of a Kptfile a case reads.
type kptfile struct {
	Pipeline struct {
		Mutators []pipelineFunction `yaml:"mutators"`
	} `yaml:"pipeline"`
}

// pipelineFunction is one function of a Kptfile's pipeline.
type pipelineFunction struct {
	ConfigMap  map[string]string `yaml:"configMap"`
	ConfigPath string            `yaml:"configPath"`
	Selectors  []selector        `yaml:"selectors"`
	Exclude    []selector        `yaml:"exclude"`
}

// selector picks resources for a pipeline function: every field set must
// match.
type selector struct {
	APIVersion  string            `yaml:"apiVersion"`
	Kind        string            `yaml:"kind"`
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (s selector) isEmpty() bool {
	return s.APIVersion == "" && s.Kind == "" && s.Name == "" && s.Namespace == "" &&
		len(s.Labels) == 0 && len(s.Annotations) == 0
}

func (s selector) matches(n *yaml.RNode) bool {
	match := func(want, got string) bool { return want == "" || want == got }
	return match(s.APIVersion, n.GetApiVersion()) && match(s.Kind, n.GetKind()) &&
		match(s.Name, n.GetName()) && match(s.Namespace, n.GetNamespace()) &&
		isSubset(s.Labels, n.GetLabels()) && isSubset(s.Annotations, n.GetAnnotations())
}

func isSubset(want, got map[string]string) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// caseRun is how a case's function is called.
type caseRun struct {
	// eval: the case is a kpt fn eval (else a kpt fn render).
	eval bool
	// exitCode is the function's expected exit code.
	exitCode int
	// mutator is the render case's function (zero for eval).
	mutator pipelineFunction
	// fnConfig is the eval case's fnConfig, if any.
	fnConfig *yaml.RNode
	// args are the eval case's key/value arguments.
	args map[string]string
}

// readCaseRun reads how the case in dir runs.
func readCaseRun(t *testing.T, dir string) caseRun {
	t.Helper()
	var cc caseConfig
	data, err := os.ReadFile(filepath.Join(dir, expectedDir, "config.yaml"))
	if err == nil {
		require.NoError(t, yaml.Unmarshal(data, &cc), "parsing %s/config.yaml", expectedDir)
	} else {
		require.True(t, os.IsNotExist(err), "reading %s/config.yaml: %v", expectedDir, err)
	}
	run := caseRun{eval: cc.TestType == "eval", exitCode: cc.ExitCode, args: cc.Args}
	if run.eval {
		if cc.FnConfig.Kind != 0 {
			run.fnConfig = yaml.NewRNode(&cc.FnConfig)
		}
		return run
	}
	data, err = os.ReadFile(filepath.Join(dir, "Kptfile"))
	require.NoError(t, err, "a render case needs a Kptfile")
	var kf kptfile
	require.NoError(t, yaml.Unmarshal(data, &kf), "parsing Kptfile")
	require.NotEmpty(t, kf.Pipeline.Mutators, "the Kptfile has no mutator")
	run.mutator = kf.Pipeline.Mutators[0]
	return run
}

// functionConfig returns the function's config for a package holding
// items: the resource at the mutator's configPath, or a ConfigMap named
// function-input holding its configMap (or the eval case's args), or the
// eval case's fnConfig; nil for none.
func (r caseRun) functionConfig(t *testing.T, items []*yaml.RNode) *yaml.RNode {
	t.Helper()
	switch {
	case r.fnConfig != nil:
		return r.fnConfig.Copy()
	case r.mutator.ConfigPath != "":
		want := filepath.Clean(r.mutator.ConfigPath)
		for _, it := range items {
			if p, _, err := kioutil.GetFileAnnotations(it); err == nil && filepath.Clean(p) == want {
				return it.Copy()
			}
		}
		t.Fatalf("configPath %q is not a resource of the package", r.mutator.ConfigPath)
	case r.mutator.ConfigMap != nil:
		return placeholderConfigMap(t, r.mutator.ConfigMap)
	case r.args != nil:
		return placeholderConfigMap(t, r.args)
	}
	return nil
}

// placeholderConfigMap is the ConfigMap kpt makes of key/value arguments.
func placeholderConfigMap(t *testing.T, data map[string]string) *yaml.RNode {
	t.Helper()
	cm, err := yaml.Parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\n")
	require.NoError(t, err)
	require.NoError(t, cm.PipeE(yaml.SetAnnotation(localConfig, "true")))
	cm.SetDataMap(data)
	return cm
}

// packageReadWriter reads and writes a package's resources as kpt does:
// its YAML files and Kptfile, honouring .krmignore, keeping the indentation
// of sequences (eval cases include subpackages).
func packageReadWriter(dir string, eval bool) *kio.LocalPackageReadWriter {
	return &kio.LocalPackageReadWriter{
		PackagePath:        dir,
		PackageFileName:    "Kptfile",
		MatchFilesGlob:     append([]string{"Kptfile"}, kio.MatchAll...),
		IncludeSubpackages: eval,
		PreserveSeqIndent:  true,
		WrapBareSeqNode:    true,
	}
}

// runCorpusCase runs process on a copy of c as kpt would and checks the
// outcome: the exit code the case expects and, on success, the package
// the case expects, file by file, as text. It returns the function's
// results.
func runCorpusCase(t *testing.T, c corpusCase, process fn.ResourceListProcessor) fn.Results {
	t.Helper()
	work := copyDir(t, c.dir)
	run := readCaseRun(t, work)
	rw := packageReadWriter(work, run.eval)
	items, err := rw.Read()
	require.NoError(t, err, "reading the package")

	out, results, err := runMutator(process, items, run.functionConfig(t, items), run.mutator)
	if run.exitCode != 0 {
		require.Error(t, err, "the function should fail; results:\n%s", results.String())
		return results
	}
	require.NoError(t, err, "results:\n%s", results.String())
	require.NoError(t, rw.Write(out), "writing the package")
	assertSameFiles(t, expectedPackage(t, c.dir), work)
	return results
}

// runMutator calls process on the items f selects, with config, and
// returns items with the function's output in place of what it was given.
func runMutator(process fn.ResourceListProcessor, items []*yaml.RNode, config *yaml.RNode, f pipelineFunction) ([]*yaml.RNode, fn.Results, error) {
	selected := func(n *yaml.RNode) bool { return selects(f.Selectors, f.Exclude, n) }
	var input []*yaml.RNode
	for i, it := range items {
		if !selected(it) {
			continue
		}
		in := it.Copy()
		if err := in.PipeE(yaml.SetAnnotation(kptResourceID, strconv.Itoa(i))); err != nil {
			return nil, nil, err
		}
		input = append(input, in)
	}
	out, results, err := callFunction(process, input, config)
	if err != nil {
		return nil, results, err
	}
	byID := map[string]*yaml.RNode{}
	var added []*yaml.RNode
	for _, o := range out {
		id := o.GetAnnotations()[kptResourceID]
		if err := o.PipeE(yaml.ClearAnnotation(kptResourceID)); err != nil {
			return nil, results, err
		}
		if id == "" {
			added = append(added, o)
		} else if _, dup := byID[id]; !dup {
			byID[id] = o
		}
	}
	var merged []*yaml.RNode
	for i, it := range items {
		switch o, ok := byID[strconv.Itoa(i)]; {
		case !selected(it):
			merged = append(merged, it)
		case ok:
			merged = append(merged, o)
		}
	}
	return append(merged, added...), results, nil
}

// selects says whether a function with these selectors and exclusions gets
// n.
func selects(selectors, exclude []selector, n *yaml.RNode) bool {
	if len(selectors) > 0 && !slices.ContainsFunc(selectors, func(s selector) bool { return s.matches(n) }) {
		return false
	}
	return !slices.ContainsFunc(exclude, func(s selector) bool { return !s.isEmpty() && s.matches(n) })
}

// callFunction sends items and config to process as a ResourceList, as
// kpt does, and returns its output items and results; err is the
// function's failure.
func callFunction(process fn.ResourceListProcessor, items []*yaml.RNode, config *yaml.RNode) ([]*yaml.RNode, fn.Results, error) {
	var results fn.Results
	filter := &runtimeutil.FunctionFilter{
		FunctionConfig: config,
		// Every resource is the function's, wherever its config is.
		GlobalScope: true,
		Run: func(in io.Reader, out io.Writer) error {
			input, err := io.ReadAll(in)
			if err != nil {
				return err
			}
			output, runErr := fn.Run(process, input)
			if rl, err := fn.ParseResourceList(output); err == nil {
				results = rl.Results
			}
			if _, err := out.Write(output); err != nil {
				return err
			}
			return runErr
		},
	}
	out, err := filter.Filter(items)
	return out, results, err
}

// expectedPackage returns a copy of the case in dir with its
// .expected/diff.patch applied.
func expectedPackage(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is needed to apply the expected diff")
	}
	want := copyDir(t, dir)
	patch := filepath.Join(dir, expectedDir, "diff.patch")
	for _, args := range [][]string{{"init", "-q"}, {"apply", "--whitespace=nowarn", patch}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = want
		output, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %s: %s", strings.Join(args, " "), output)
	}
	return want
}

// assertSameFiles checks that dirs want and got hold the same files with
// the same text, leaving out .expected and .git.
func assertSameFiles(t *testing.T, want, got string) {
	t.Helper()
	wantFiles, gotFiles := packageFiles(t, want), packageFiles(t, got)
	assert.Equal(t, wantFiles, gotFiles, "the package's files")
	for _, f := range wantFiles {
		if !slices.Contains(gotFiles, f) {
			continue
		}
		w, err := os.ReadFile(filepath.Join(want, f))
		require.NoError(t, err)
		g, err := os.ReadFile(filepath.Join(got, f))
		require.NoError(t, err)
		assert.Equal(t, string(w), string(g), "%s", f)
	}
}

// packageFiles lists the files under dir, relative to it, but .expected
// and .git.
func packageFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == expectedDir || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// copyDir copies the tree at src to a new temporary directory and
// returns it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	require.NoError(t, err, "copying %s", src)
	return dst
}
