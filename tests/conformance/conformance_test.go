// Conformance: every case of the KRM catalog corpus (../shared/krm-corpus,
// see CORPUS.md there) rendered through the gateway, once with the go
// executor and once with the binary executor, must give the expected exit
// code, package diff and results.
package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
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
	ws, err := filepath.EvalSymlinks(stack.Path(t, os.Getenv("FNRUNNER_WORKSPACE_FILE")))
	if err != nil {
		t.Fatalf("locating the repository: %v", err)
	}
	return filepath.Join(filepath.Dir(ws), "..", "shared", "krm-corpus")
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
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := os.Stat(root); err != nil {
		t.Skipf("KRM corpus not found at %s (%v): conformance NOT checked. CI and checkouts have it at ../shared/krm-corpus.", root, err)
	}
	all := cases(t, root)
	if len(all) == 0 {
		t.Fatalf("no cases under %s", root)
	}
	for _, executor := range []struct{ name, disable string }{{"go", "binary,pod"}, {"binary", "go,pod"}} {
		t.Run(executor.name, func(t *testing.T) {
			s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=" + executor.disable}})
			for _, dir := range all {
				rel, _ := filepath.Rel(root, dir)
				t.Run(rel, func(t *testing.T) { runCase(t, s, dir) })
			}
		})
	}
}

func runCase(t *testing.T, s *stack.Stack, src string) {
	var cfg expectedConfig
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "config.yaml")); err == nil {
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
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
		if err != nil {
			t.Fatalf("render %d: %v", i+1, err)
		}
	}
	if list.ExitCode != cfg.ExitCode {
		t.Errorf("exit code %d, want %d; results: %+v", list.ExitCode, cfg.ExitCode, list.Items)
	}

	git(t, pkg, "add", "-A")
	got := git(t, pkg, "diff", "--cached")
	want := ""
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "diff.patch")); err == nil {
		want = string(data)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("package diff differs.\n--- got\n%s\n--- want\n%s", got, want)
	}

	if data, err := os.ReadFile(filepath.Join(src, ".expected", "results.yaml")); err == nil {
		var exp kptrender.ResultList
		if err := yaml.Unmarshal(data, &exp); err != nil {
			t.Fatal(err)
		}
		compareResults(t, list, &exp)
	}
}

// compareResults compares what kpt prints, loosely: stderr is runtime-specific
// and file.index is kpt's bookkeeping.
func compareResults(t *testing.T, got, want *kptrender.ResultList) {
	t.Helper()
	if got.ExitCode != want.ExitCode || len(got.Items) != len(want.Items) {
		t.Fatalf("result list: exit code %d with %d items, want %d with %d", got.ExitCode, len(got.Items), want.ExitCode, len(want.Items))
	}
	for i := range want.Items {
		g, w := got.Items[i], want.Items[i]
		if g.Image != w.Image || g.ExitCode != w.ExitCode {
			t.Errorf("item %d: %s exit %d, want %s exit %d", i, g.Image, g.ExitCode, w.Image, w.ExitCode)
		}
		if gr, wr := normalize(g.Results), normalize(w.Results); !reflect.DeepEqual(gr, wr) {
			t.Errorf("item %d results:\n got  %q\n want %q", i, gr, wr)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	content := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kptfile.kpt.dev\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ndata:\n  name: " + kf.Metadata.Name + "\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=fnrunner", "-c", "user.email=test@fnrunner.invalid", "-c", "core.autocrlf=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
