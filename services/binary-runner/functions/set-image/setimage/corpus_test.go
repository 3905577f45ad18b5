package setimage_test

// The corpus test runs every set-image case of the KRM catalog corpus
// (shared/krm-corpus-next, see CORPUS.md there) the way kpt would and
// compares the package, as text, with the package after .expected/diff.patch,
// and the results with .expected/results.yaml. The same harness is in
// package searchreplace's tests.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-image/setimage"
)

// corpusFunction is the function whose cases this test runs: the corpus
// directories whose names start with it.
const corpusFunction = "set-image"

func TestCorpus(t *testing.T) {
	runCorpus(t, corpusFunction, setimage.Run)
}

// localConfigAnnotation marks resources that are configuration, not output.
const localConfigAnnotation = "config.kubernetes.io/local-config"

// runCorpus runs every corpus case of function through process.
func runCorpus(t *testing.T, function string, process fn.ResourceListProcessorFunc) {
	root := corpusRoot(t)
	if root == "" {
		t.Skip("KRM corpus not found: set FNRUNNER_KRM_CORPUS_NEXT, or put shared/krm-corpus-next/examples beside the module's root")
	}
	if _, err := os.Stat(root); err != nil {
		t.Skipf("KRM corpus not found at %s (FNRUNNER_KRM_CORPUS_NEXT): %v", root, err)
	}
	dirs, err := filepath.Glob(filepath.Join(root, function+"*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "no %s cases under %s", function, root)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { runCase(t, dir, process) })
	}
}

// corpusRoot is FNRUNNER_KRM_CORPUS_NEXT, else
// ../shared/krm-corpus-next/examples from the module's root (the directory
// of go.mod above the test's directory) if it is there, else "".
func corpusRoot(t *testing.T) string {
	if dir := os.Getenv("FNRUNNER_KRM_CORPUS_NEXT"); dir != "" {
		return dir
	}
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			corpus := filepath.Join(dir, "..", "shared", "krm-corpus-next", "examples")
			if _, err := os.Stat(corpus); err != nil {
				return ""
			}
			return corpus
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// corpusCase is how a case runs its function.
type corpusCase struct {
	fnConfig  *yaml.RNode
	selectors []selector
	exclude   []selector
	exitCode  int
}

// selector is a Kptfile function selector.
type selector struct {
	apiVersion, kind, name, namespace string
	labels, annotations               map[string]string
}

func runCase(t *testing.T, src string, process fn.ResourceListProcessorFunc) {
	c := loadCase(t, src)
	tmp := t.TempDir()
	actual := filepath.Join(tmp, "actual")
	copyPackage(t, src, actual)
	expected := expectedPackage(t, src, filepath.Join(tmp, "expected"))

	all, err := kio.LocalPackageReader{PackagePath: actual, PreserveSeqIndent: true}.Read()
	require.NoError(t, err)
	var input []*yaml.RNode
	for _, n := range all {
		require.NoError(t, setLegacyFileAnnotations(n))
		if isInput(n, c) {
			input = append(input, n)
		}
	}

	out, runErr := fn.Run(process, resourceList(t, input, c.fnConfig))
	exitCode := 0
	if runErr != nil {
		exitCode = 1
	}
	rl, err := fn.ParseResourceList(out)
	require.NoError(t, err, "output:\n%s", out)
	require.Equal(t, c.exitCode, exitCode, "exit code (error %v); results: %v", runErr, rl.Results)
	if exitCode == 0 {
		writeBack(t, actual, all, rl.Items)
	}

	assertSameFiles(t, expected, actual)
	if want := expectedResults(t, src); want != nil {
		assert.Equal(t, want, normalizeResults(rl.Results), "results")
	}
}

// loadCase reads how the case runs: a Kptfile's first mutator, an eval
// .expected/config.yaml, or the kpt fn eval line of .expected/exec.sh.
func loadCase(t *testing.T, src string) corpusCase {
	var c corpusCase
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "config.yaml")); err == nil {
		cfg, err := yaml.Parse(string(data))
		require.NoError(t, err)
		if code, err := cfg.Pipe(yaml.Lookup("exitCode")); err == nil && code != nil {
			c.exitCode, err = strconv.Atoi(code.YNode().Value)
			require.NoError(t, err)
		}
		if testType, _ := cfg.Pipe(yaml.Lookup("testType")); testType != nil && testType.YNode().Value == "eval" {
			c.fnConfig = evalConfig(t, cfg)
			return c
		}
	}
	if script, err := os.ReadFile(filepath.Join(src, ".expected", "exec.sh")); err == nil {
		args, ok := evalArgs(t, string(script))
		require.True(t, ok, "no kpt fn eval line in exec.sh")
		c.fnConfig = configMap(t, args)
		return c
	}
	kf, err := os.ReadFile(filepath.Join(src, "Kptfile"))
	require.NoError(t, err, "case has no Kptfile, eval config.yaml or exec.sh")
	kptfile, err := yaml.Parse(string(kf))
	require.NoError(t, err)
	mutator := firstElement(t, kptfile, "pipeline", "mutators")
	require.NotNil(t, mutator, "Kptfile has no mutator")
	c.fnConfig = mutatorConfig(t, src, mutator)
	c.selectors = selectors(t, mutator, "selectors")
	c.exclude = selectors(t, mutator, "exclude")
	return c
}

// firstElement is the first element of the list at path in n; nil when
// there is none.
func firstElement(t *testing.T, n *yaml.RNode, path ...string) *yaml.RNode {
	list, err := n.Pipe(yaml.Lookup(path...))
	require.NoError(t, err)
	if list == nil {
		return nil
	}
	elems, err := list.Elements()
	require.NoError(t, err)
	if len(elems) == 0 {
		return nil
	}
	return elems[0]
}

// evalConfig is the functionConfig of an eval case: its fnConfig, or its
// args as kpt's function-input ConfigMap.
func evalConfig(t *testing.T, cfg *yaml.RNode) *yaml.RNode {
	if fc, _ := cfg.Pipe(yaml.Lookup("fnConfig")); fc != nil {
		return fc
	}
	args := map[string]string{}
	if a, _ := cfg.Pipe(yaml.Lookup("args")); a != nil {
		require.NoError(t, a.VisitFields(func(f *yaml.MapNode) error {
			args[f.Key.YNode().Value] = f.Value.YNode().Value
			return nil
		}))
	}
	return configMap(t, args)
}

// mutatorConfig is a Kptfile function's functionConfig: its configMap as
// kpt's function-input ConfigMap, or the file at its configPath.
func mutatorConfig(t *testing.T, pkg string, mutator *yaml.RNode) *yaml.RNode {
	if path, _ := mutator.Pipe(yaml.Lookup("configPath")); path != nil {
		data, err := os.ReadFile(filepath.Join(pkg, path.YNode().Value))
		require.NoError(t, err)
		fc, err := yaml.Parse(string(data))
		require.NoError(t, err)
		return fc
	}
	data := map[string]string{}
	if cm, _ := mutator.Pipe(yaml.Lookup("configMap")); cm != nil {
		require.NoError(t, cm.VisitFields(func(f *yaml.MapNode) error {
			data[f.Key.YNode().Value] = f.Value.YNode().Value
			return nil
		}))
	}
	return configMap(t, data)
}

// configMap is the ConfigMap kpt makes of key/values: named function-input,
// every value a string.
func configMap(t *testing.T, data map[string]string) *yaml.RNode {
	cm := yaml.MustParse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata: {}\n")
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		require.NoError(t, cm.PipeE(yaml.Lookup("data"), yaml.SetField(k, yaml.NewStringRNode(data[k]))))
	}
	return cm
}

// selectors reads a Kptfile function's selectors or exclude list.
func selectors(t *testing.T, mutator *yaml.RNode, field string) []selector {
	list, err := mutator.Pipe(yaml.Lookup(field))
	require.NoError(t, err)
	if list == nil {
		return nil
	}
	elems, err := list.Elements()
	require.NoError(t, err)
	out := make([]selector, 0, len(elems))
	for _, e := range elems {
		s := selector{labels: stringMap(t, e, "labels"), annotations: stringMap(t, e, "annotations")}
		for field, dst := range map[string]*string{"apiVersion": &s.apiVersion, "kind": &s.kind, "name": &s.name, "namespace": &s.namespace} {
			if f := e.Field(field); f != nil {
				*dst = f.Value.YNode().Value
			}
		}
		out = append(out, s)
	}
	return out
}

// stringMap reads a map of strings field of n.
func stringMap(t *testing.T, n *yaml.RNode, field string) map[string]string {
	m := map[string]string{}
	f := n.Field(field)
	if f == nil {
		return m
	}
	require.NoError(t, f.Value.VisitFields(func(e *yaml.MapNode) error {
		m[e.Key.YNode().Value] = e.Value.YNode().Value
		return nil
	}))
	return m
}

// evalArgs returns the key=value arguments after "--" of the kpt fn eval
// command in a shell script.
func evalArgs(t *testing.T, script string) (map[string]string, bool) {
	words := shellWords(strings.ReplaceAll(script, "\\\n", " "))
	for i := 0; i+2 < len(words); i++ {
		if words[i] != "kpt" || words[i+1] != "fn" || words[i+2] != "eval" {
			continue
		}
		args := map[string]string{}
		dashes := false
		for _, w := range words[i+3:] {
			if w == "\n" {
				break
			}
			if w == "--" {
				dashes = true
				continue
			}
			if k, v, ok := strings.Cut(w, "="); dashes && ok {
				args[k] = v
			}
		}
		require.True(t, dashes, "kpt fn eval without --")
		return args, true
	}
	return nil, false
}

// shellWords splits a shell script into words, with single and double
// quotes, backslash escapes and comments; each line end is a "\n" word.
func shellWords(s string) []string {
	var words []string
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			flush()
			words = append(words, "\n")
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			i--
		case c == '\'':
			inWord = true
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				end = len(s) - i - 1
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				word.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			inWord = true
			i++
			word.WriteByte(s[i])
		default:
			inWord = true
			word.WriteByte(c)
		}
	}
	flush()
	return words
}

// setLegacyFileAnnotations sets the file annotations under their legacy
// names too, as kpt does.
func setLegacyFileAnnotations(n *yaml.RNode) error {
	path, index, err := kioutil.GetFileAnnotations(n)
	if err != nil {
		return fmt.Errorf("file annotations: %w", err)
	}
	if err := n.PipeE(yaml.SetAnnotation(kioutil.LegacyPathAnnotation, path)); err != nil {
		return fmt.Errorf("set path annotation: %w", err)
	}
	if err := n.PipeE(yaml.SetAnnotation(kioutil.LegacyIndexAnnotation, index)); err != nil {
		return fmt.Errorf("set index annotation: %w", err)
	}
	return nil
}

// isInput says whether kpt passes resource n to the case's function: it is
// not local configuration, matches a selector (if any) and no exclusion.
func isInput(n *yaml.RNode, c corpusCase) bool {
	if n.GetAnnotations()[localConfigAnnotation] == "true" {
		return false
	}
	if len(c.selectors) > 0 && !matchesAny(n, c.selectors) {
		return false
	}
	return !matchesAny(n, c.exclude)
}

// matchesAny says whether n matches one of the selectors.
func matchesAny(n *yaml.RNode, selectors []selector) bool {
	for _, s := range selectors {
		if s.matches(n) {
			return true
		}
	}
	return false
}

// matches says whether n has every property the selector gives.
func (s selector) matches(n *yaml.RNode) bool {
	for _, f := range [][2]string{
		{s.apiVersion, n.GetApiVersion()}, {s.kind, n.GetKind()}, {s.name, n.GetName()}, {s.namespace, n.GetNamespace()},
	} {
		if f[0] != "" && f[0] != f[1] {
			return false
		}
	}
	return subset(s.labels, n.GetLabels()) && subset(s.annotations, n.GetAnnotations())
}

// subset says whether every entry of want is in got.
func subset(want, got map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// resourceList is the ResourceList kpt sends the function.
func resourceList(t *testing.T, items []*yaml.RNode, fnConfig *yaml.RNode) []byte {
	var buf bytes.Buffer
	w := kio.ByteWriter{
		Writer:                &buf,
		KeepReaderAnnotations: true,
		WrappingAPIVersion:    kio.ResourceListAPIVersion,
		WrappingKind:          kio.ResourceListKind,
		FunctionConfig:        fnConfig,
	}
	copies := make([]*yaml.RNode, len(items))
	for i, n := range items {
		copies[i] = n.Copy()
	}
	require.NoError(t, w.Write(copies))
	return buf.Bytes()
}

// writeBack writes the function's output items to their files, with the
// other resources of those files, as kpt does.
func writeBack(t *testing.T, pkg string, all []*yaml.RNode, items fn.KubeObjects) {
	byFile := map[string][]*yaml.RNode{}
	for _, obj := range items {
		n := obj.CopyToResourceNode()
		path, _, err := kioutil.GetFileAnnotations(n)
		require.NoError(t, err)
		byFile[path] = append(byFile[path], n)
	}
	var nodes []*yaml.RNode
	for _, n := range all {
		path, _, err := kioutil.GetFileAnnotations(n)
		require.NoError(t, err)
		if out, ok := byFile[path]; ok {
			if !hasIndexOf(out, n) {
				byFile[path] = append(out, n)
			}
		}
	}
	for _, ns := range byFile {
		nodes = append(nodes, ns...)
	}
	require.NoError(t, kio.LocalPackageWriter{PackagePath: pkg}.Write(nodes))
}

// hasIndexOf says whether nodes has a resource at n's index in its file.
func hasIndexOf(nodes []*yaml.RNode, n *yaml.RNode) bool {
	_, index, _ := kioutil.GetFileAnnotations(n)
	for _, o := range nodes {
		if _, i, _ := kioutil.GetFileAnnotations(o); i == index {
			return true
		}
	}
	return false
}

// expectedPackage makes dst the case package with .expected/diff.patch
// applied.
func expectedPackage(t *testing.T, src, dst string) string {
	copyPackage(t, src, dst)
	git(t, dst, "init", "-q")
	git(t, dst, "add", "-A")
	git(t, dst, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "case")
	patch := filepath.Join(src, ".expected", "diff.patch")
	if _, err := os.Stat(patch); err == nil {
		git(t, dst, "apply", patch)
	}
	require.NoError(t, os.RemoveAll(filepath.Join(dst, ".git")))
	return dst
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
}

// copyPackage copies the case package, without .expected, to dst.
func copyPackage(t *testing.T, src, dst string) {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".expected" {
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

// assertSameFiles compares two package trees file by file, as text.
func assertSameFiles(t *testing.T, want, got string) {
	wantFiles, gotFiles := readTree(t, want), readTree(t, got)
	for path, w := range wantFiles {
		g, ok := gotFiles[path]
		if assert.True(t, ok, "missing file %s", path) {
			assert.Equal(t, w, g, "file %s", path)
		}
	}
	for path := range gotFiles {
		_, ok := wantFiles[path]
		assert.True(t, ok, "unexpected file %s", path)
	}
}

// readTree reads every file under dir by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(data)
		return err
	})
	require.NoError(t, err)
	return files
}

// expectedResults reads the results of .expected/results.yaml's first
// function, normalized; nil when the case has none.
func expectedResults(t *testing.T, src string) []string {
	data, err := os.ReadFile(filepath.Join(src, ".expected", "results.yaml"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	list, err := yaml.Parse(string(data))
	require.NoError(t, err)
	var rs fn.Results
	if item := firstElement(t, list, "items"); item != nil {
		if results := item.Field("results"); results != nil {
			require.NoError(t, results.Value.YNode().Decode(&rs))
		}
	}
	return normalizeResults(rs)
}

// normalizeResults keeps what the test compares of each result: severity,
// message, resource, field path and file path.
func normalizeResults(rs fn.Results) []string {
	out := []string{}
	for _, r := range rs {
		s := string(r.Severity) + "|" + r.Message
		if ref := r.ResourceRef; ref != nil {
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
