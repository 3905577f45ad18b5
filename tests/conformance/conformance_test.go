// Conformance: every case of the KRM catalog corpus (../shared/krm-corpus,
// see CORPUS.md there) and of this package's testdata (starlark cases in the
// same format; their expected diffs are made by hand from the function's
// documentation) rendered through the gateway, once with the go executor
// and once with the binary executor, must give the expected exit code,
// package diff and results.
package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

// The catalog versions fnrunner ships; the corpus uses old image names.
var versions = map[string]string{
	"set-namespace":      "v0.4.5",
	"apply-setters":      "v0.2.2",
	"apply-replacements": "v0.1.5",
	"starlark":           "v0.5.5",
}

func mapImage(image string) string {
	name := image[strings.LastIndex(image, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	if v, ok := versions[name]; ok {
		return name + ":" + v
	}
	return image
}

// corpus finds ../shared/krm-corpus beside the repository.
func corpus(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("FNRUNNER_KRM_CORPUS"); dir != "" {
		return dir
	}
	return filepath.Join(harness.Workspace(t), "..", "shared", "krm-corpus")
}

func cases(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "Kptfile" {
			out = append(out, filepath.Dir(p))
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(out)
	return out
}

type expectedConfig struct {
	TestType string `yaml:"testType"`
	ExitCode int    `yaml:"exitCode"`
	RunCount int    `yaml:"runCount"`
}

func TestCorpus(t *testing.T) {
	root := corpus(t)
	_, err := os.Stat(root)
	// Never a skip: a run without the corpus has checked nothing.
	require.NoError(t, err, "KRM corpus not found at %s: conformance cannot be checked. Put shared/ beside the repository (CI and checkouts have it at ../shared/krm-corpus) or set FNRUNNER_KRM_CORPUS.", root)
	all := cases(t, root)
	require.NotEmpty(t, all, "no cases under %s", root)
	own, err := filepath.Abs("testdata")
	require.NoError(t, err)
	ownCases := cases(t, own)
	require.NotEmpty(t, ownCases, "no cases under %s", own)
	for _, executor := range []struct{ name, disable string }{{"go", "binary,pod"}, {"binary", "go,pod"}} {
		t.Run(executor.name, func(t *testing.T) {
			s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=" + executor.disable}})
			for _, dir := range all {
				rel, _ := filepath.Rel(root, dir)
				t.Run(rel, func(t *testing.T) { runCase(t, s, dir) })
			}
			for _, dir := range ownCases {
				t.Run("testdata/"+filepath.Base(dir), func(t *testing.T) { runCase(t, s, dir) })
			}
		})
	}
}

func runCase(t *testing.T, s *stack.Stack, src string) {
	var cfg expectedConfig
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "config.yaml")); err == nil {
		require.NoError(t, yaml.Unmarshal(data, &cfg))
	}
	if cfg.TestType != "" && cfg.TestType != "render" {
		t.Skipf("testType %q is not run by this harness", cfg.TestType)
	}
	if cfg.RunCount == 0 {
		cfg.RunCount = 1
	}

	pkg := filepath.Join(t.TempDir(), filepath.Base(src))
	copyDir(t, src, pkg)
	git(t, pkg, "init", "-q")
	git(t, pkg, "add", "-A")
	git(t, pkg, "commit", "-q", "-m", "original")
	if script, err := os.ReadFile(filepath.Join(src, ".expected", "exec.sh")); err == nil && strings.Contains(string(script), "kpt pkg init") {
		pkgInit(t, pkg)
	}

	var list *kptrender.ResultList
	for i := 0; i < cfg.RunCount; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		list, err = kptrender.Render(ctx, pkg, s.Client(), kptrender.Options{MapImage: mapImage})
		cancel()
		require.NoError(t, err, "render %d", i+1)
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
		compareResults(t, list, &exp)
	}
}

// compareResults compares what kpt prints, loosely: stderr is runtime-specific
// and file.index is kpt's bookkeeping.
func compareResults(t *testing.T, got, want *kptrender.ResultList) {
	t.Helper()
	require.Equal(t, want.ExitCode, got.ExitCode, "result list: exit code")
	require.Len(t, got.Items, len(want.Items), "result list: items")
	for i := range want.Items {
		g, w := got.Items[i], want.Items[i]
		assert.Equal(t, w.Image, g.Image, "item %d: image", i)
		assert.Equal(t, w.ExitCode, g.ExitCode, "item %d: %s exit code", i, g.Image)
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
