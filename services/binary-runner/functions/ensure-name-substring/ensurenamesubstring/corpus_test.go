package ensurenamesubstring_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/ensure-name-substring/ensurenamesubstring"
)

// functionName is the catalog image name of the function under test; the
// corpus cases for it are the directories whose names start with it.
const functionName = "ensure-name-substring"

// TestCorpus runs the function on each of its cases in the KRM corpus
// (FNRUNNER_KRM_CORPUS_NEXT, by default shared/krm-corpus-next/examples
// beside the repository) the way kpt does, with fnrunner's kpt emulation
// (libs/kptrender: the package's resources as kpt reads them, the Kptfile
// and local config included, written back as kpt writes them), and
// compares the package, file by file and as text, with the case's package
// after its .expected/diff.patch.
func TestCorpus(t *testing.T) {
	root := corpusRoot(t)
	if _, err := os.Stat(root); err != nil {
		t.Skipf("KRM corpus not found (set FNRUNNER_KRM_CORPUS_NEXT): %v", err)
	}
	dirs, err := filepath.Glob(filepath.Join(root, functionName+"*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "no %s cases under %s", functionName, root)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { runCorpusCase(t, dir) })
	}
}

// corpusRoot is FNRUNNER_KRM_CORPUS_NEXT, or
// ../shared/krm-corpus-next/examples from the module's root.
func corpusRoot(t *testing.T) string {
	if dir := os.Getenv("FNRUNNER_KRM_CORPUS_NEXT"); dir != "" {
		return dir
	}
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "krm-corpus-next", "examples")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "" // not found: the test skips
		}
		dir = parent
	}
}

// expectedConfig is a case's .expected/config.yaml.
type expectedConfig struct {
	TestType string            `yaml:"testType"`
	ExitCode int               `yaml:"exitCode"`
	Image    string            `yaml:"image"`
	Args     map[string]string `yaml:"args"`
	FnConfig string            `yaml:"fnConfig"`
}

func runCorpusCase(t *testing.T, src string) {
	var cfg expectedConfig
	if data, err := os.ReadFile(filepath.Join(src, ".expected", "config.yaml")); err == nil {
		require.NoError(t, yaml.Unmarshal(data, &cfg))
	}
	want := expectedPackage(t, src)
	got := filepath.Join(t.TempDir(), filepath.Base(src))
	copyPackage(t, src, got)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := inProcess{name: functionName, process: ensurenamesubstring.Run}
	var (
		list *kptrender.ResultList
		err  error
	)
	if cfg.TestType == "eval" {
		var config *yaml.RNode
		config, err = evalConfig(src, got, cfg)
		require.NoError(t, err)
		list, err = kptrender.Eval(ctx, got, ev, cfg.Image, config, kptrender.Options{})
	} else {
		list, err = kptrender.Render(ctx, got, ev, kptrender.Options{})
	}
	require.NoError(t, err)
	require.Equal(t, cfg.ExitCode, list.ExitCode, "exit code; results: %+v", list.Items)
	assertSameFiles(t, want, got)
}

// evalConfig is an eval case's functionConfig: its fnConfig file (relative
// to .expected), or a ConfigMap of its args, as kpt fn eval makes them.
func evalConfig(src, pkg string, cfg expectedConfig) (*yaml.RNode, error) {
	if cfg.FnConfig != "" {
		rel, err := filepath.Rel(src, filepath.Join(src, ".expected", cfg.FnConfig))
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, errors.New("fnConfig " + cfg.FnConfig + " is not in the package")
		}
		return yaml.ReadFile(filepath.Join(pkg, rel))
	}
	if len(cfg.Args) == 0 {
		return nil, nil
	}
	return kptrender.ConfigMap(cfg.Args)
}

// inProcess is a kptrender.Evaluator that runs one function in this
// process, as its binary would (fn.Run), and fails as the gateway does:
// codes.Internal when the function fails.
type inProcess struct {
	name    string
	process fn.ResourceListProcessorFunc
}

func (e inProcess) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	image := in.GetImage()
	name, _, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	if name != e.name {
		return nil, status.Errorf(codes.NotFound, "no function %q here (only %s)", image, e.name)
	}
	out, err := fn.Run(e.process, in.GetResourceList())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.EvaluateFunctionResponse{ResourceList: out}, nil
}

// expectedPackage is a copy of the case's package, in a git repository,
// with its .expected/diff.patch applied.
func expectedPackage(t *testing.T, src string) string {
	dir := filepath.Join(t.TempDir(), filepath.Base(src))
	copyPackage(t, src, dir)
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "original")
	if patch := filepath.Join(src, ".expected", "diff.patch"); fileExists(patch) {
		git(t, dir, "apply", patch)
	}
	return dir
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// copyPackage copies the package in src to dst, less its .expected.
func copyPackage(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && d.Name() == ".expected":
			return filepath.SkipDir
		case d.IsDir():
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

// assertSameFiles checks that the packages in want and got have the same
// files with the same text (.git aside).
func assertSameFiles(t *testing.T, want, got string) {
	t.Helper()
	wantFiles, gotFiles := readFiles(t, want), readFiles(t, got)
	require.Equal(t, sortedKeys(wantFiles), sortedKeys(gotFiles), "files of the package")
	for name, text := range wantFiles {
		assert.Equal(t, text, gotFiles[name], "file %s", name)
	}
}

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
