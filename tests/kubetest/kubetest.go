// Package kubetest starts a real kube-apiserver and etcd for tests, through
// controller-runtime's envtest.
//
// The binaries come from @envtest (tools/bzl/envtest.bzl), built from the Go
// module proxy. Under Bazel a go_test finds them through
//
//	env = {
//	    "TEST_ASSET_KUBE_APISERVER": "$(rootpath @envtest//:bin/kube-apiserver)",
//	    "TEST_ASSET_ETCD": "$(rootpath @envtest//:bin/etcd)",
//	}
//
// and with plain `go test` through KUBEBUILDER_ASSETS, e.g.
// KUBEBUILDER_ASSETS=$(tools/bazel info output_base)/external/envtest/bin.
package kubetest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/testcerts"
)

// Environment is a running kube-apiserver with etcd behind it.
type Environment struct {
	// Config reaches the apiserver as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client built from Config and Scheme.
	Client client.Client
	// Scheme knows the built-in kinds and whatever Options.AddToScheme added.
	Scheme *runtime.Scheme
	// KubeConfig is a kubeconfig file's content for the same administrator,
	// for running service binaries against the apiserver.
	KubeConfig []byte

	apiServer *envtest.APIServer
}

// StopAPIServer stops kube-apiserver (etcd keeps running), as an outage of
// the control plane would: SIGTERM, and SIGKILL if it is not gone within a
// few seconds (with watches open it can take much longer). StartAPIServer
// brings it back on the same address with the same certificates, so
// clients reconnect.
func (e *Environment) StopAPIServer() error {
	e.apiServer.StopTimeout = 5 * time.Second
	_ = e.apiServer.Stop()
	// Gone once its port refuses connections.
	addr := net.JoinHostPort(e.apiServer.SecureServing.Address, e.apiServer.SecureServing.Port)
	for i := 0; i < 500; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver still listens on %s", addr)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer.
func (e *Environment) StartAPIServer() error { return e.apiServer.Start() }

// Options change what Start sets up.
type Options struct {
	// CRDs to install before Start returns.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// CRDDirectoryPaths are directories or files of CRD YAML to install.
	CRDDirectoryPaths []string
	// AddToScheme functions for the types the tests use.
	AddToScheme []func(*runtime.Scheme) error
	// Address is the apiserver's serving address ("": 127.0.0.1), which
	// the kubeconfig names too.
	Address string
	// ServingHosts, when set, are the names and addresses kube-apiserver's
	// serving certificate is for (envtest's names localhost and the serving
	// address only), e.g. the kubernetes Service's address for pods.
	ServingHosts []string
	// APIServerArgs set kube-apiserver flags (name without dashes → value;
	// "" removes a flag envtest would set).
	APIServerArgs map[string]string
}

// Start starts kube-apiserver and etcd and stops them when the test ends. It
// fails the test, never skips it, when the binaries cannot be found.
func Start(t testing.TB, opts Options) *Environment {
	t.Helper()
	if err := resolveAssets(t); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme}, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			t.Fatalf("building scheme: %v", err)
		}
	}
	// A certificate directory of our own, so that the apiserver can be
	// restarted with the same serving certificate (see StopAPIServer).
	api := &envtest.APIServer{CertDir: t.TempDir()}
	if opts.Address != "" {
		// envtest picks a loopback address unless given a port too.
		l, err := net.Listen("tcp", net.JoinHostPort(opts.Address, "0"))
		if err != nil {
			t.Fatalf("a port for kube-apiserver on %s: %v", opts.Address, err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		api.SecureServing.ListenAddr = envtest.ListenAddr{Address: opts.Address, Port: port}
	}
	if len(opts.ServingHosts) > 0 {
		// envtest keeps a serving certificate it finds in CertDir; its
		// clients trust SecureServing.CA.
		f := testcerts.GenerateFor(t, api.CertDir, "apiserver", opts.ServingHosts)
		ca, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		api.SecureServing.CA = ca
		// Finding a serving certificate, envtest makes none of the files
		// it makes with it: the service account signing key and
		// certificate (its names).
		sa := testcerts.GenerateFor(t, t.TempDir(), "sa-signer", []string{"sa-signer"})
		for from, to := range map[string]string{sa.Cert: "sa-signer.crt", sa.Key: "sa-signer.key"} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(api.CertDir, to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range opts.APIServerArgs {
		if v == "" {
			api.Configure().Disable(k)
		} else {
			api.Configure().Set(k, v)
		}
	}
	env := &envtest.Environment{
		ControlPlane:          envtest.ControlPlane{APIServer: api},
		Scheme:                scheme,
		CRDs:                  opts.CRDs,
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing: len(opts.CRDDirectoryPaths) > 0,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping kube-apiserver and etcd: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client for the test apiserver: %v", err)
	}
	return &Environment{Config: cfg, Client: c, Scheme: scheme, KubeConfig: env.KubeConfig, apiServer: api}
}

// resolveAssets makes the TEST_ASSET_* paths absolute: Bazel's rootpath is
// relative to the main workspace's runfiles directory, while a go_test runs
// in its package directory.
func resolveAssets(t testing.TB) error {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		return nil
	}
	// The variables envtest reads for each binary's path.
	for _, name := range []string{"TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_ETCD"} {
		p := os.Getenv(name)
		if p == "" {
			return fmt.Errorf("%s is not set: run under Bazel (tools/bazel test), or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd", name)
		}
		p = harness.Runfile(t, p)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.Setenv(name, p); err != nil {
			return err
		}
	}
	return nil
}
