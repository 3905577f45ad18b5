package kptrender_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// labeller labels every resource it gets, deletes the one named "doomed"
// and adds a ConfigMap "added"; it records the names it was given.
type labeller struct{ got []string }

func (l *labeller) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	r := &kio.ByteReader{Reader: bytes.NewReader(in.GetResourceList()), PreserveSeqIndent: true}
	items, err := r.Read()
	if err != nil {
		return nil, err
	}
	var out []*yaml.RNode
	for _, it := range items {
		l.got = append(l.got, it.GetName())
		if it.GetName() == "doomed" {
			continue
		}
		if err := it.PipeE(yaml.SetLabel("touched", "yes")); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	added, err := yaml.Parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: added\n  annotations:\n    config.kubernetes.io/path: added.yaml\n")
	if err != nil {
		return nil, err
	}
	out = append(out, added)
	rl, err := kptrender.BuildResourceList(out, nil)
	if err != nil {
		return nil, err
	}
	return &pb.EvaluateFunctionResponse{ResourceList: rl}, nil
}

func TestSelectorsAndExclude(t *testing.T) {
	for _, c := range []struct {
		name      string
		selection string
		given     []string
		labelled  []string
	}{
		{"kind selector", "selectors:\n        - kind: ConfigMap", []string{"a", "doomed"}, []string{"a"}},
		{"two selectors, either matches", "selectors:\n        - name: a\n        - labels: {tier: web}", []string{"a", "d"}, []string{"a", "d"}},
		{"every field of a selector must match", "selectors:\n        - kind: ConfigMap\n          name: d", nil, nil},
		{"exclude", "exclude:\n        - kind: ConfigMap", []string{"d"}, []string{"d"}},
		{"selectors then exclude", "selectors:\n        - kind: ConfigMap\n      exclude:\n        - name: doomed", []string{"a"}, []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			kptfile := "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: p\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  mutators:\n    - image: labeller\n      " + c.selection + "\n"
			resources := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: doomed\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  labels:\n    tier: web\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "Kptfile"), []byte(kptfile), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "resources.yaml"), []byte(resources), 0o644))
			fn := &labeller{}
			list, err := kptrender.Render(context.Background(), dir, fn, kptrender.Options{})
			require.NoError(t, err)
			require.Zero(t, list.ExitCode)
			// The Kptfile is local config; kpt gives it to functions
			// only when selected too.
			var given []string
			for _, n := range fn.got {
				if n != "p" {
					given = append(given, n)
				}
			}
			assert.Equal(t, c.given, given, "resources the function got")

			r := &kio.LocalPackageReader{PackagePath: dir}
			items, err := r.Read()
			require.NoError(t, err)
			var names, labelled []string
			for _, it := range items {
				assert.NotContains(t, it.GetAnnotations(), "internal.config.k8s.io/kpt-resource-id")
				names = append(names, it.GetName())
				if it.GetLabels()["touched"] == "yes" {
					labelled = append(labelled, it.GetName())
				}
			}
			assert.Equal(t, c.labelled, labelled, "resources changed")
			want := []string{"a", "doomed", "d", "added"}
			if contains(c.given, "doomed") {
				want = []string{"a", "d", "added"}
			}
			assert.ElementsMatch(t, want, names, "unselected resources stay, deleted ones go, new ones are added")
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// canned answers every call with the same ResourceList items, whatever it
// was given.
type canned struct{ items string }

func (c canned) EvaluateFunction(_ context.Context, _ *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	return &pb.EvaluateFunctionResponse{ResourceList: []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + c.items)}, nil
}

// TestOutputKptRefuses: what kpt refuses from a function is an error of the
// render, and the package is left as it was.
func TestOutputKptRefuses(t *testing.T) {
	for _, c := range []struct{ name, items, want string }{
		{
			name:  "not KRM",
			items: "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    annotations:\n      internal.config.kubernetes.io/path: cm.yaml\n",
			want:  "must contain only KRM resources: cm.yaml: resource must have `metadata.name`",
		},
		{
			name: "two resources at one path and index",
			items: "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    annotations:\n      internal.config.kubernetes.io/path: cm.yaml\n      internal.config.kubernetes.io/index: '0'\n" +
				"- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n    annotations:\n      internal.config.kubernetes.io/path: cm.yaml\n      internal.config.kubernetes.io/index: '0'\n",
			want: `resource at path "cm.yaml" and index "0" already exists`,
		},
		{
			name:  "outside the package",
			items: "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    annotations:\n      internal.config.kubernetes.io/path: ../../etc/cm.yaml\n",
			want:  "function must not modify resources outside of package",
		},
		{
			name:  "outside the package by the legacy annotation",
			items: "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    annotations:\n      config.kubernetes.io/path: ../cm.yaml\n",
			want:  "function must not modify resources outside of package",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writePackage(t, dir, map[string]string{
				"Kptfile":        kptfile("p", "    - image: canned\n"),
				"resources.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
			})
			_, err := kptrender.Render(context.Background(), dir, canned{c.items}, kptrender.Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			got, err := os.ReadFile(filepath.Join(dir, "resources.yaml"))
			require.NoError(t, err)
			assert.Equal(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n", string(got), "package unchanged")
			_, err = os.Stat(filepath.Join(dir, "..", "cm.yaml"))
			assert.True(t, os.IsNotExist(err), "nothing written outside the package")
		})
	}
}

// recorder answers with what it was given and records, per call, the
// image (less the catalog's registry, which kpt puts before a short name;
// one not put there is recorded as "unresolved <image>"), the
// functionConfig's name and the given resources' names.
type recorder struct{ calls []string }

// catalogRegistry is where kpt resolves a function's short name.
const catalogRegistry = "ghcr.io/kptdev/krm-functions-catalog/"

func shortName(image string) string {
	if s, ok := strings.CutPrefix(image, catalogRegistry); ok {
		return s
	}
	return "unresolved " + image
}

func (r *recorder) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	rl, err := yaml.Parse(string(in.GetResourceList()))
	if err != nil {
		return nil, err
	}
	call := shortName(in.GetImage()) + " config="
	if fc := rl.Field("functionConfig"); fc != nil {
		call += fc.Value.GetName()
	}
	call += ":"
	items, err := rl.Pipe(yaml.Lookup("items"))
	if err != nil {
		return nil, err
	}
	elems, err := items.Elements()
	if err != nil {
		return nil, err
	}
	for _, it := range elems {
		call += " " + it.GetName()
	}
	r.calls = append(r.calls, call)
	return &pb.EvaluateFunctionResponse{ResourceList: in.GetResourceList()}, nil
}

// TestSubpackages: each package's pipeline runs after its subpackages',
// on its resources and theirs, and a configPath names a resource of its
// own package even when a subpackage has a file of that name.
func TestSubpackages(t *testing.T) {
	dir := t.TempDir()
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n"
	}
	writePackage(t, dir, map[string]string{
		"Kptfile":            kptfile("root", "    - image: root-fn\n      configPath: fn.yaml\n"),
		"fn.yaml":            cm("root-config"),
		"a.yaml":             cm("root-a"),
		"b/Kptfile":          kptfile("b", "    - image: b-fn\n      configPath: fn.yaml\n"),
		"b/fn.yaml":          cm("b-config"),
		"b/c/Kptfile":        kptfile("c", ""),
		"b/c/c.yaml":         cm("c-c"),
		"a/Kptfile":          kptfile("a", "    - image: a-fn\n"),
		"a/a.yaml":           cm("a-a"),
		"plain/plain.yaml":   cm("root-plain"),
		".git/ignored/x.txt": "not a package",
	})
	r := &recorder{}
	list, err := kptrender.Render(context.Background(), dir, r, kptrender.Options{})
	require.NoError(t, err)
	require.Zero(t, list.ExitCode)
	assert.Equal(t, []string{
		"a-fn config=: a a-a",
		"b-fn config=b-config: c c-c b b-config",
		"root-fn config=root-config: a a-a c c-c b b-config root root-a root-config root-plain",
	}, r.calls)
	got, err := os.ReadFile(filepath.Join(dir, "b", "c", "c.yaml"))
	require.NoError(t, err)
	assert.Equal(t, cm("c-c"), string(got), "written back where it was, with no annotation of the render")
}

func kptfile(name, mutators string) string {
	s := "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: " + name + "\n"
	if mutators != "" {
		s += "pipeline:\n  mutators:\n" + mutators
	}
	return s
}

func writePackage(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// TestWriteStaysInPackage: what a render writes and prunes is the
// package's files, as kpt names them, and nothing through a link.
func TestWriteStaysInPackage(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	item := func(path string) string {
		return "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n    annotations:\n      internal.config.kubernetes.io/path: " + path + "\n"
	}
	t.Run("a path kpt cleans is the same file", func(t *testing.T) {
		dir := t.TempDir()
		writePackage(t, dir, map[string]string{"Kptfile": kptfile("p", "    - image: canned\n"), "a.yaml": cm})
		_, err := kptrender.Render(context.Background(), dir, canned{item("./a.yaml")}, kptrender.Options{})
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, "a.yaml"))
		require.NoError(t, err, "written, not pruned")
		assert.Equal(t, cm, string(got))
	})
	t.Run("not through a symbolic link", func(t *testing.T) {
		dir, outside := t.TempDir(), t.TempDir()
		writePackage(t, dir, map[string]string{"Kptfile": kptfile("p", "    - image: canned\n"), "a.yaml": cm})
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, "out")))
		_, err := kptrender.Render(context.Background(), dir, canned{item("out/x.yaml")}, kptrender.Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "symbolic link")
		entries, err := os.ReadDir(outside)
		require.NoError(t, err)
		assert.Empty(t, entries, "nothing written outside the package")
	})
	t.Run("files of no rendered package are not pruned", func(t *testing.T) {
		dir := t.TempDir()
		writePackage(t, dir, map[string]string{
			"Kptfile":        kptfile("p", "    - image: canned\n"),
			"a.yaml":         cm,
			".git/x/Kptfile": kptfile("x", ""),
			".git/x/b.yaml":  cm,
		})
		_, err := kptrender.Render(context.Background(), dir, canned{item("a.yaml")}, kptrender.Options{})
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(dir, ".git/x/b.yaml"))
		assert.NoError(t, err)
	})
}

// TestValidatorConfigFromDisk: as kpt, a validator's configPath is the
// file on disk, not the resource as the mutators left it.
func TestValidatorConfigFromDisk(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{
		"Kptfile":  "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: p\npipeline:\n  mutators:\n    - image: renamer\n  validators:\n    - image: recorder\n      configPath: cfg.yaml\n",
		"cfg.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: on-disk\n",
	})
	r := &recorder{}
	ev := evaluators{"renamer": renamer{}, "recorder": r}
	list, err := kptrender.Render(context.Background(), dir, ev, kptrender.Options{})
	require.NoError(t, err)
	require.Zero(t, list.ExitCode)
	require.Len(t, r.calls, 1)
	assert.Contains(t, r.calls[0], "config=on-disk:", "the validator's config as on disk")
	assert.Contains(t, r.calls[0], " renamed", "the validator sees the mutated resources")
}

// evaluators sends each image to its own evaluator.
type evaluators map[string]kptrender.Evaluator

func (e evaluators) EvaluateFunction(ctx context.Context, in *pb.EvaluateFunctionRequest, opts ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	return e[shortName(in.GetImage())].EvaluateFunction(ctx, in, opts...)
}

// renamer renames every resource "renamed".
type renamer struct{}

func (renamer) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	items, err := (&kio.ByteReader{Reader: bytes.NewReader(in.GetResourceList())}).Read()
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if it.GetKind() != "Kptfile" {
			if err := it.SetName("renamed"); err != nil {
				return nil, err
			}
		}
	}
	rl, err := kptrender.BuildResourceList(items, nil)
	if err != nil {
		return nil, err
	}
	return &pb.EvaluateFunctionResponse{ResourceList: rl}, nil
}

// TestKptfileAsStrictAsKpt: a Kptfile kpt refuses is refused, not run as
// something else.
func TestKptfileAsStrictAsKpt(t *testing.T) {
	head := "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: p\n"
	for name, c := range map[string]struct{ kptfile, want string }{
		"misspelt pipeline":         {head + "pipelin:\n  mutators:\n    - image: x\n", "field pipelin not found in type v1.KptFile"},
		"misspelt function field":   {head + "pipeline:\n  mutators:\n    - image: x\n      configmap: {a: b}\n", "field configmap not found in type v1.Function"},
		"misspelt selector field":   {head + "pipeline:\n  mutators:\n    - image: x\n      selectors:\n        - kinds: Deployment\n", "field kinds not found in type v1.Selector"},
		"image and exec":            {head + "pipeline:\n  mutators:\n    - image: x\n      exec: ./x\n", "must not specify both `image` and `exec`"},
		"configMap and configPath":  {head + "pipeline:\n  validators:\n    - image: x\n      configPath: a.yaml\n      configMap: {a: b}\n", "must not specify both `configMap` and `configPath`"},
		"configPath outside":        {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: ../../etc/a.yaml\n", "path must not be outside the package"},
		"configPath absolute":       {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: /etc/a.yaml\n", "must be relative"},
		"not kpt.dev/v1":            {"apiVersion: kpt.dev/v1alpha1\nkind: Kptfile\nmetadata:\n  name: p\n", `old resource version "v1alpha1" found in Kptfile`},
		"an image name kpt refuses": {head + "pipeline:\n  mutators:\n    - image: Gcr.io/Kpt-Fn/X:v1\n", `function name "Gcr.io/Kpt-Fn/X:v1" is invalid`},
		"configPath missing":        {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: none.yaml\n", "functionConfig must exist in the current package"},
		"configPath of two configs": {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: two.yaml\n", `functionConfig "two.yaml" must not contain more than one config, got 2`},
		"configPath not KRM":        {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: bare.yaml\n", `functionConfig "bare.yaml": resource must have`},
		"configPath empty":          {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: empty.yaml\n", "functionConfig must contain a config"},
		"configPath through a link": {head + "pipeline:\n  mutators:\n    - image: x\n      configPath: link.yaml\n", "goes through the symbolic link"},
		"a function with no image":  {head + "pipeline:\n  mutators:\n    - configMap: {a: b}\n", "must specify a functon (`image` or `exec`) to execute"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writePackage(t, dir, map[string]string{
				"Kptfile":    c.kptfile,
				"two.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
				"bare.yaml":  "data:\n  a: b\n",
				"empty.yaml": "# nothing here\n",
			})
			if name == "configPath through a link" {
				outside := filepath.Join(t.TempDir(), "secret.yaml")
				require.NoError(t, os.WriteFile(outside, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"), 0o644))
				require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link.yaml")))
				// Not read as a resource: only as the config.
				require.NoError(t, os.WriteFile(filepath.Join(dir, ".krmignore"), []byte("link.yaml\n"), 0o644))
			}
			_, err := kptrender.Render(context.Background(), dir, canned{}, kptrender.Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestBFSRendering: under kpt.dev/bfs-rendering a package's pipeline runs
// before its subpackages', on its own resources and then its descendants'
// (a child, its descendants, the next child), and a subpackage sees only
// itself and what is below it.
func TestBFSRendering(t *testing.T) {
	dir := t.TempDir()
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
	}
	root := kptfile("root", "    - image: root-fn\n")
	root = strings.Replace(root, "  name: root\n", "  name: root\n  annotations:\n    kpt.dev/bfs-rendering: \"True\"\n", 1)
	writePackage(t, dir, map[string]string{
		"Kptfile":     root,
		"r.yaml":      cm("root-r"),
		"b/Kptfile":   kptfile("b", "    - image: b-fn\n"),
		"b/b.yaml":    cm("b-b"),
		"b/c/Kptfile": kptfile("c", "    - image: c-fn\n"),
		"b/c/c.yaml":  cm("c-c"),
		"a/Kptfile":   kptfile("a", "    - image: a-fn\n"),
		"a/a.yaml":    cm("a-a"),
	})
	r := &recorder{}
	list, err := kptrender.Render(context.Background(), dir, r, kptrender.Options{})
	require.NoError(t, err)
	require.Zero(t, list.ExitCode)
	assert.Equal(t, []string{
		"root-fn config=: root root-r a a-a b b-b c c-c",
		"a-fn config=: a a-a",
		"b-fn config=: b b-b c c-c",
		"c-fn config=: c c-c",
	}, r.calls)
	assert.Equal(t, 4, list.Packages)
}

// TestExecFunctions: an exec function runs on this machine only when
// allowed, as kpt fn render --allow-exec; without that the render fails
// before any mutator runs and writes nothing.
func TestExecFunctions(t *testing.T) {
	resources := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 1\n"
	for _, c := range []struct {
		name       string
		exec       string
		allow      bool
		wantErr    error
		exitCode   int
		stderr     string
		wantOnDisk string
	}{
		{name: "not allowed", exec: "sed s/replicas:.1/replicas:.3/", wantErr: kptrender.ErrExecNotAllowed, wantOnDisk: resources},
		{name: "allowed", exec: "sed 's/replicas: 1/replicas: 3/'", allow: true, wantOnDisk: strings.Replace(resources, "replicas: 1", "replicas: 3", 1)},
		{name: "exits 3", exec: "sh -c 'cat >/dev/null; echo refused >&2; exit 3'", allow: true, exitCode: 3, stderr: "refused\n", wantOnDisk: resources},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writePackage(t, dir, map[string]string{
				"Kptfile":        kptfile("p", "    - image: first\n    - exec: \""+strings.ReplaceAll(c.exec, `"`, `\"`)+"\"\n"),
				"resources.yaml": resources,
			})
			r := &recorder{}
			list, err := kptrender.Render(context.Background(), dir, r, kptrender.Options{AllowExec: c.allow})
			got, rerr := os.ReadFile(filepath.Join(dir, "resources.yaml"))
			require.NoError(t, rerr)
			assert.Equal(t, c.wantOnDisk, string(got))
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				assert.Empty(t, r.calls, "kpt refuses the pipeline before its first mutator")
				return
			}
			require.NoError(t, err)
			require.Len(t, list.Items, 2)
			step := list.Items[1]
			assert.Equal(t, c.exec, step.ExecPath)
			assert.Empty(t, step.Image)
			assert.Equal(t, c.exitCode, step.ExitCode)
			assert.Equal(t, c.stderr, step.Stderr)
			if c.exitCode != 0 {
				assert.Equal(t, 1, list.ExitCode)
			}
		})
	}
}

// alive says whether the process pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	return !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("Z"))
}

// startedPID reads the pid a function wrote to file.
func startedPID(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// TestExecFunctionLeavesNothing: what an exec function started and left
// running is killed when it exits, and when it runs past its time it is
// killed with what it started, and the render fails saying so.
func TestExecFunctionLeavesNothing(t *testing.T) {
	for name, c := range map[string]struct {
		script  string
		timeout time.Duration
		wantErr error
	}{
		"exits, a child left": {script: "cat; sleep 60 >/dev/null 2>&1 </dev/null & echo $! > %s; echo done >&2"},
		"past its time":       {script: "sleep 60 >/dev/null 2>&1 </dev/null & echo $! > %s; sleep 60", timeout: 200 * time.Millisecond, wantErr: context.DeadlineExceeded},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(t.TempDir(), "pid")
			script := fmt.Sprintf(c.script, pidFile)
			writePackage(t, dir, map[string]string{
				"Kptfile": kptfile("p", "    - exec: \"sh -c '"+script+"'\"\n"),
			})
			timeout := c.timeout
			if timeout == 0 {
				timeout = time.Minute
			}
			list, err := kptrender.Render(context.Background(), dir, &recorder{}, kptrender.Options{AllowExec: true, ExecTimeout: timeout})
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
			} else {
				require.NoError(t, err)
				require.Len(t, list.Items, 1)
				assert.Equal(t, "done\n", list.Items[0].Stderr, "stderr kept on success, as kpt keeps it")
			}
			pid := startedPID(t, pidFile)
			assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond, "the child %d is killed", pid)
		})
	}
}

// unavailable answers every call with Unavailable.
type unavailable struct{}

func (unavailable) EvaluateFunction(context.Context, *pb.EvaluateFunctionRequest, ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	return nil, status.Error(codes.Unavailable, "no runner")
}

// TestCallFailureIsAnItem: a call that failed (not the function: the
// runner) fails the render and, as in kpt, is an item of the result list
// with exit code 1, so results.yaml says the render failed.
func TestCallFailureIsAnItem(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{
		"Kptfile":        kptfile("p", "    - image: set-labels:v0.2.2\n      configMap: {a: b}\n"),
		"resources.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
	})
	list, err := kptrender.Render(context.Background(), dir, unavailable{}, kptrender.Options{})
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "the call's status, wrapped: %v", err)
	require.NotNil(t, list)
	assert.Equal(t, 1, list.ExitCode)
	if assert.Len(t, list.Items, 1) {
		assert.Equal(t, "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.2", list.Items[0].Image, "named as kpt names it")
		assert.Equal(t, 1, list.Items[0].ExitCode)
	}
}

// keys records the annotation keys of every resource it is given.
type keys struct{ seen map[string]bool }

func (k *keys) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	items, err := (&kio.ByteReader{Reader: bytes.NewReader(in.GetResourceList())}).Read()
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		for a := range it.GetAnnotations() {
			k.seen[a] = true
		}
	}
	return &pb.EvaluateFunctionResponse{ResourceList: in.GetResourceList()}, nil
}

// TestValidatorSelectorsGiveNoIDs: a validator with selectors gets the
// selected resources as kpt gives them, without kpt's resource ids (a
// mutator's get them, to merge its output back).
func TestValidatorSelectorsGiveNoIDs(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{
		"Kptfile":        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: p\npipeline:\n  validators:\n    - image: keys\n      selectors:\n        - kind: ConfigMap\n",
		"resources.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
	})
	k := &keys{seen: map[string]bool{}}
	_, err := kptrender.Render(context.Background(), dir, k, kptrender.Options{})
	require.NoError(t, err)
	assert.NotContains(t, k.seen, "internal.config.k8s.io/kpt-resource-id")
	assert.Contains(t, k.seen, "config.kubernetes.io/path", "the validator was given the resource")
}

// TestBuiltinPkgContext: kpt's builtin builtins/gen-pkg-context runs in
// process, as kpt fn render runs it: the package's package-context.yaml
// is made (an old one replaced), with kpt's info result, and nothing is
// sent to the evaluator. (In a package with subpackages it fails, as
// kpt's does: every Kptfile is at "Kptfile" of its own package then.)
func TestBuiltinPkgContext(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{
		"Kptfile":              kptfile("shop", "    - image: builtins/gen-pkg-context\n"),
		"package-context.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kptfile.kpt.dev\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ndata:\n  name: stale\n",
	})
	r := &recorder{}
	list, err := kptrender.Render(context.Background(), dir, r, kptrender.Options{})
	require.NoError(t, err)
	assert.Empty(t, r.calls, "a builtin is not sent")
	require.Len(t, list.Items, 1)
	assert.Equal(t, "builtins/gen-pkg-context", list.Items[0].Image)
	if assert.Len(t, list.Items[0].Results, 1) {
		assert.Equal(t, "generated package context", list.Items[0].Results[0].Message)
	}
	got, err := os.ReadFile(filepath.Join(dir, "package-context.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kptfile.kpt.dev\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ndata:\n  name: shop\n", string(got))
}

// TestEmptyConfigMapGivesNoConfig: as kpt, a configMap with nothing in it
// gives the function no functionConfig; one with data gives kpt's
// function-input ConfigMap.
func TestEmptyConfigMapGivesNoConfig(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{
		"Kptfile": kptfile("p", "    - image: empty\n      configMap: {}\n    - image: full\n      configMap: {a: b}\n"),
	})
	r := &recorder{}
	_, err := kptrender.Render(context.Background(), dir, r, kptrender.Options{})
	require.NoError(t, err)
	require.Len(t, r.calls, 2)
	assert.True(t, strings.HasPrefix(r.calls[0], "empty config=:"), r.calls[0])
	assert.True(t, strings.HasPrefix(r.calls[1], "full config=function-input:"), r.calls[1])
}

// TestEvalCallFailureIsAnItem: Eval records a failed call as render does.
func TestEvalCallFailureIsAnItem(t *testing.T) {
	dir := t.TempDir()
	writePackage(t, dir, map[string]string{"resources.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	list, err := kptrender.Eval(context.Background(), dir, unavailable{}, "set-labels:v0.2.2", nil, kptrender.Options{})
	require.Error(t, err)
	require.NotNil(t, list)
	assert.Equal(t, 1, list.ExitCode)
	require.Len(t, list.Items, 1)
	assert.Equal(t, 1, list.Items[0].ExitCode)
}

// TestNothingReadThroughALink: a resource file that is a symbolic link
// (here to a file out of the package) fails the render before any function
// sees it, whether the output goes back to the package or elsewhere.
func TestNothingReadThroughALink(t *testing.T) {
	for _, toOutput := range []bool{false, true} {
		dir := t.TempDir()
		writePackage(t, dir, map[string]string{"Kptfile": kptfile("p", "    - image: echo\n")})
		secret := filepath.Join(t.TempDir(), "secret.yaml")
		require.NoError(t, os.WriteFile(secret, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"), 0o644))
		require.NoError(t, os.Symlink(secret, filepath.Join(dir, "leak.yaml")))
		r := &recorder{}
		var out bytes.Buffer
		opts := kptrender.Options{}
		if toOutput {
			opts.Output = &out
		}
		_, err := kptrender.Render(context.Background(), dir, r, opts)
		require.Error(t, err, "output elsewhere: %v", toOutput)
		assert.Contains(t, err.Error(), "symbolic link")
		assert.Empty(t, r.calls)
		assert.Empty(t, out.String())
	}
}
