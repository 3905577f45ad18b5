// Package porch runs porch itself — porch-server, Gitea, etcd,
// kube-apiserver and kube-controller-manager, in a network namespace of
// the test's own — and porch's own end-to-end suites against it, with
// porch-server's --function-runner at a runner the caller starts: porch's
// function-runner or fnrunner's gateway.
//
// Porch runs as porch's deployments/local has it: porch-server outside the
// cluster, registered through its APIService, whose Service is an
// ExternalName for localhost (porch's localconfig.yaml, with the host's
// name changed). The binaries and porch's source come from @porch
// (tools/bzl/porch.bzl), Gitea from @gitea.
package porch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/testcerts"
)

// Ports inside the namespace: nothing else listens there.
const (
	porchPort = 9443
	// RunnerAddress is where porch-server's --function-runner points.
	RunnerAddress = "127.0.0.1:9445"
)

// Binaries are what a porch run needs, from the runfiles.
type Binaries struct {
	PorchServer, FunctionRunner, Gitea string
	// Suites: test binary → the package directory it runs in.
	APISuite, FnRunnerSuite string
	// Src is porch's source tree; GiteaStatic is Gitea's STATIC_ROOT_PATH.
	Src, GiteaStatic      string
	KubeControllerManager string
}

// FromEnv reads the binaries from the FNRUNNER_PORCH_* variables
// tests/porch's BUILD file sets.
func FromEnv(t testing.TB) Binaries {
	t.Helper()
	server := harness.Binary(t, "FNRUNNER_PORCH_SERVER")
	return Binaries{
		PorchServer:    server,
		FunctionRunner: harness.Binary(t, "FNRUNNER_PORCH_FUNCTION_RUNNER"),
		APISuite:       harness.Binary(t, "FNRUNNER_PORCH_E2E_API"),
		FnRunnerSuite:  harness.Binary(t, "FNRUNNER_PORCH_E2E_FN_RUNNER"),
		Gitea:          harness.Binary(t, "FNRUNNER_GITEA"),
		// static/options/readme/Default → static
		GiteaStatic: filepath.Dir(filepath.Dir(filepath.Dir(harness.Binary(t, "FNRUNNER_GITEA_STATIC_OPTIONS")))),
		// bin/porch-server → src beside bin
		Src:                   filepath.Join(filepath.Dir(filepath.Dir(server)), "src"),
		KubeControllerManager: harness.Binary(t, "FNRUNNER_KUBE_CONTROLLER_MANAGER"),
	}
}

// Manifests are the objects of file in porch's deployments/porch, as an
// operator deploys them.
func (b Binaries) Manifests(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	return readObjects(t, filepath.Join(b.Src, "deployments/porch", file))
}

// Env is a running porch with its control plane and Gitea.
type Env struct {
	Bins       Binaries
	Dir        string
	Kube       *kubetest.Environment
	KubeConfig string
	Gitea      *Gitea
	// Runner is porch-server's --function-runner.
	Runner string
	procs  []*proc
}

// CRDs are porch's own CRDs, which its control plane needs before
// porch-server starts.
func (b Binaries) CRDs() []string {
	return []string{
		filepath.Join(b.Src, "api/porchconfig/v1alpha1/config.porch.kpt.dev_repositories.yaml"),
		filepath.Join(b.Src, "internal/api/porchinternal/v1alpha1/config.porch.kpt.dev_packagerevs.yaml"),
	}
}

// AggregationArgs are the kube-apiserver flags of the aggregation layer,
// with a front-proxy client certificate made in dir: kube-apiserver
// proxies porch.kpt.dev to porch-server and says who asked in these
// headers.
func AggregationArgs(t testing.TB, dir string) map[string]string {
	t.Helper()
	proxy := testcerts.GenerateFor(t, dir, "front-proxy-client", []string{"front-proxy-client"})
	return map[string]string{
		"requestheader-client-ca-file":       proxy.CA,
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             proxy.Cert,
		"proxy-client-key-file":              proxy.Key,
	}
}

// Start brings up the control plane, Gitea and porch-server; porch-server
// calls RunnerAddress, which startRunner must make answer (it is called
// once the control plane is up; e.KubeConfig names it).
func Start(t *testing.T, bins Binaries, crds []string, startRunner func(e *Env) error) *Env {
	t.Helper()
	harness.NeedRoot(t, "porch's suites in a network namespace")
	if !InNamespace() {
		t.Fatal("tests/porch: the package's TestMain must be porch.InNetworkNamespace")
	}
	dir := t.TempDir()
	args := AggregationArgs(t, dir)
	// The namespace has no default route to pick an address from.
	args["advertise-address"] = "127.0.0.1"
	kube := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: append(bins.CRDs(), crds...), APIServerArgs: args})
	e := &Env{Bins: bins, Dir: dir, Kube: kube, Runner: RunnerAddress}
	t.Cleanup(e.stop)
	e.writeKubeConfig(t)
	// Namespaces are deleted, and what they held collected, by
	// kube-controller-manager: the suites delete theirs.
	e.start(t, "kube-controller-manager", bins.KubeControllerManager, []string{
		"--kubeconfig=" + e.KubeConfig, "--leader-elect=false", "--root-ca-file=" + filepath.Join(e.Dir, "ca.crt"),
		"--controllers=*,-serviceaccount-token,-csrsigning,-csrapproving,-nodeipam",
		"--bind-address=127.0.0.1", "--use-service-account-credentials=false",
	}, nil, "")
	e.startPorch(t, startRunner)
	return e
}

// StartOn brings up Gitea and porch-server on a control plane the caller
// started, with AggregationArgs, bins.CRDs and a kube-controller-manager
// of its own; porch-server calls runner, which startRunner must make
// answer. porch-server and Gitea listen on loopback: the caller's network
// namespace must be kube-apiserver's, and one of its own
// (InNetworkNamespace).
func StartOn(t *testing.T, bins Binaries, kube *kubetest.Environment, runner string, startRunner func(e *Env) error) *Env {
	t.Helper()
	harness.NeedRoot(t, "porch's suites in a network namespace")
	if !InNamespace() {
		t.Fatal("tests/porch: the package's TestMain must be porch.InNetworkNamespace")
	}
	e := &Env{Bins: bins, Dir: t.TempDir(), Kube: kube, Runner: runner}
	t.Cleanup(e.stop)
	e.writeKubeConfig(t)
	e.startPorch(t, startRunner)
	return e
}

func (e *Env) writeKubeConfig(t testing.TB) {
	t.Helper()
	e.KubeConfig = filepath.Join(e.Dir, "kubeconfig")
	writeFile(t, e.KubeConfig, e.Kube.KubeConfig)
	writeFile(t, filepath.Join(e.Dir, "ca.crt"), e.Kube.Config.CAData)
}

// startPorch creates porch's local configuration, starts the runner,
// Gitea and porch-server, and waits until porch's API is served.
func (e *Env) startPorch(t *testing.T, startRunner func(e *Env) error) {
	t.Helper()
	ctx := context.Background()
	// porch's local configuration: its namespace, the APIService and the
	// ExternalName Service behind it.
	objs := readObjects(t, filepath.Join(e.Bins.Src, "deployments/local/localconfig.yaml"))
	for _, o := range objs {
		switch o.GetKind() {
		case "Service":
			require(t, unstructured.SetNestedField(o.Object, "localhost", "spec", "externalName"))
		case "APIService":
			require(t, unstructured.SetNestedField(o.Object, int64(porchPort), "spec", "service", "port"))
		}
		// A second porch on one control plane finds them there.
		if err := e.Kube.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	e.WritableSource(t)
	if err := startRunner(e); err != nil {
		t.Fatalf("starting the function runner: %v", err)
	}

	var err error
	e.Gitea, err = StartGitea(ctx, e.Bins.Gitea, e.Bins.GiteaStatic, filepath.Join(e.Bins.Src, "test/pkgs/test-pkgs/test-blueprints.bundle"), filepath.Join(e.Dir, "gitea"))
	if err != nil {
		t.Fatalf("gitea: %v", err)
	}
	t.Cleanup(e.Gitea.Stop)

	e.startPorchServer(t)
	// kube-aggregator retries the APIService's availability with a
	// backoff of up to 30 s: porch-server's own startup (its webhook keys,
	// its cache) comes on top.
	if err := harness.Poll(3*time.Minute, time.Second, func() error {
		if err := e.exited(); err != nil {
			return err
		}
		_, err := e.discovery().ServerResourcesForGroupVersion("porch.kpt.dev/v1alpha1")
		return err
	}); err != nil {
		t.Fatalf("porch.kpt.dev/v1alpha1 not served through the APIService: %v\n%s", err, e.logs())
	}
}

// startPorchServer starts porch-server with porch's flags for a run
// outside the cluster.
func (e *Env) startPorchServer(t testing.TB) {
	t.Helper()
	certs := filepath.Join(e.Dir, "porch-certs")
	webhookCerts := filepath.Join(e.Dir, "webhook-certs")
	for _, d := range []string{certs, webhookCerts, filepath.Join(e.Dir, "porch-cache")} {
		require(t, os.MkdirAll(d, 0o755))
	}
	e.start(t, "porch-server", e.Bins.PorchServer, []string{
		"--kubeconfig=" + e.KubeConfig,
		fmt.Sprintf("--secure-port=%d", porchPort), "--bind-address=127.0.0.1",
		"--cert-dir=" + certs,
		"--cache-directory=" + filepath.Join(e.Dir, "porch-cache"),
		"--function-runner=" + e.Runner,
		"--repo-sync-frequency=60s",
		"--max-request-body-size=6291456",
		"--v=2",
	}, []string{
		// The admission webhooks (porch turns them on with CERT_STORAGE_DIR;
		// they read KUBECONFIG, not --kubeconfig): the deletion webhook at
		// localhost, the Repository one through the APIService's Service.
		"CERT_STORAGE_DIR=" + webhookCerts, "KUBECONFIG=" + e.KubeConfig, "WEBHOOK_HOST=localhost",
		"OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none",
	}, "")
}

func (e *Env) discovery() discovery.DiscoveryInterface {
	return kubernetes.NewForConfigOrDie(e.Kube.Config).Discovery()
}

// Suite is one of porch's e2e suites.
type Suite struct {
	Name   string
	Binary string
	// Dir is the directory it runs in.
	Dir string
	Env []string
	// Timeout is the suite binary's -test.timeout.
	Timeout time.Duration
	// Run, when set, is the suite binary's -test.run: the tests it runs.
	Run string
}

// Run runs a suite with `-test.v` and returns its output and what it took.
func (e *Env) Run(ctx context.Context, s Suite, out io.Writer) (string, time.Duration, error) {
	args := []string{"-test.v", "-test.timeout=" + s.Timeout.String()}
	if s.Run != "" {
		args = append(args, "-test.run="+s.Run)
	}
	cmd := exec.CommandContext(ctx, s.Binary, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.KubeConfig)
	cmd.Env = append(cmd.Env, s.Env...)
	var buf bytes.Buffer
	w := io.MultiWriter(&buf, out)
	cmd.Stdout, cmd.Stderr = w, w
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = nil // failed tests: the output says which
	}
	return buf.String(), time.Since(start), err
}

// WritableSource copies porch's source where the suites may write (they
// run in their package directories), once.
func (e *Env) WritableSource(t testing.TB) {
	t.Helper()
	dst := filepath.Join(e.Dir, "src")
	if _, err := os.Stat(dst); err == nil {
		return
	}
	if out, err := exec.Command("cp", "-R", e.Bins.Src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copying porch's source: %v: %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", dst).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v: %s", err, out)
	}
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
}

// lockedBuffer is a process's output, read while the process writes it.
// Not localstack.LogBuffer: porch's run is cached on porch's inputs, and
// the library it links must not change with fnrunner's launcher.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exited names a process of the run that is gone.
func (e *Env) exited() error {
	for _, p := range e.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, tail(p.log.String(), 40))
		default:
		}
	}
	return nil
}

func (e *Env) start(t testing.TB, name, bin string, args, env []string, dir string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	e.procs = append(e.procs, p)
	return p
}

// StartProcess runs another process for the run (a runner), stopped with the rest.
func (e *Env) StartProcess(t testing.TB, name, bin string, args, env []string) {
	e.start(t, name, bin, args, env, e.Dir)
}

func (e *Env) stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// logs are the last lines of every process, for a failure.
func (e *Env) logs() string {
	var b strings.Builder
	for _, p := range e.procs {
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, tail(p.log.String(), 40))
	}
	if e.Gitea != nil {
		fmt.Fprintf(&b, "--- gitea\n%s\n", tail(e.Gitea.Log(), 40))
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func readObjects(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	require(t, err)
	defer f.Close()
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		require(t, err)
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	require(t, os.WriteFile(path, data, 0o600))
}

func require(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Suites are porch's two suites as porch's make/testing.mk runs them (E2E=1
// and TPP=1), in local mode (no function-runner Service: porch-server runs
// outside the cluster, and so do both runners).
func (e *Env) Suites(t testing.TB) []Suite {
	t.Helper()
	src := filepath.Join(e.Dir, "src")
	// fn_runner reads testdata/resources-for-krm-functions/ where porch's
	// tree has it; the module zip has the files in testdata/ directly.
	fnDir := filepath.Join(e.Dir, "fn_runner")
	require(t, os.MkdirAll(filepath.Join(fnDir, "testdata"), 0o755))
	require(t, os.Symlink(filepath.Join(src, "test/e2e/fn_runner/testdata"), filepath.Join(fnDir, "testdata/resources-for-krm-functions")))
	return []Suite{
		{Name: "api", Binary: e.Bins.APISuite, Dir: filepath.Join(src, "test/e2e/api"), Env: []string{"E2E=1"}, Timeout: 30 * time.Minute},
		{Name: "fn_runner", Binary: e.Bins.FnRunnerSuite, Dir: fnDir, Env: []string{"TPP=1"}, Timeout: 15 * time.Minute},
	}
}

// PodTests are porch's api tests that need function pods: they run when
// porch's namespace has a function-runner Service with a selector (porch's
// runner in the cluster).
var PodTests = []string{"TestPodEvaluator", "TestPodEvaluatorSequentialParallel", "TestPodEvaluatorParallelExecution", "TestMetricsEndpoint"}

// PodSuite is porch's api suite, its PodTests only, as suite "api-pods",
// with the function images under registry (KRM_FN_REGISTRY_URL, which the
// suite puts before every image it names).
func (e *Env) PodSuite(registry string) Suite {
	return Suite{
		Name: "api-pods", Binary: e.Bins.APISuite, Dir: filepath.Join(e.Dir, "src", "test/e2e/api"),
		Env:     []string{"E2E=1", "KRM_FN_REGISTRY_URL=" + registry},
		Timeout: 15 * time.Minute,
		Run:     "^TestE2E$/^(" + strings.Join(PodTests, "|") + ")$",
	}
}
