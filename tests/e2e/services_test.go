package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tests/testcerts"
)

// Every service explains each of its flags.
func TestEveryServiceHasHelp(t *testing.T) {
	for env, flags := range map[string][]string{
		"FNRUNNER_GATEWAY":           {"-port", "-max-request-body-size", "-config-address", "-binary-runner-address", "-disable-runtimes", "-metrics-address", "-drain-timeout", "-log-level"},
		"FNRUNNER_BINARY_RUNNER":     {"-port", "-functions", "-allow-absolute-binary-paths", "-max-request-body-size", "-config-address", "-metrics-address"},
		"FNRUNNER_CONFIG_RECONCILER": {"-port", "-namespace", "-config-dir", "-default-image-prefix", "-leader-elect", "-kubeconfig", "-metrics-address"},
	} {
		out, err := exec.Command(stack.Binary(t, env), "--help").CombinedOutput()
		if err != nil {
			t.Errorf("%s --help: %v", env, err)
		}
		for _, f := range flags {
			if !strings.Contains(string(out), f+" ") && !strings.Contains(string(out), f+"\n") {
				t.Errorf("%s --help does not explain %s:\n%s", env, f, out)
			}
		}
		if bad, err := exec.Command(stack.Binary(t, env), "--no-such-flag").CombinedOutput(); err == nil {
			t.Errorf("%s accepted an unknown flag:\n%s", env, bad)
		}
	}
}

// The gateway keeps serving the last executor table when the
// config-reconciler goes away.
func TestGatewayKeepsLastTable(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	if _, err := call(t, s, "set-namespace:v0.4.5", stack.Input, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.StopService("config-reconciler", 30*time.Second); err != nil {
		t.Fatalf("stopping the config-reconciler: %v", err)
	}
	for i := 0; i < 5; i++ {
		if _, err := call(t, s, "set-namespace:v0.4.5", stack.Input, time.Minute); err != nil {
			t.Fatalf("call %d without the config-reconciler: %v", i, err)
		}
	}
	if err := s.WaitServing(context.Background()); err != nil {
		t.Errorf("gateway not SERVING without the config-reconciler: %v", err)
	}
}

// A service serves Prometheus metrics on --metrics-address and drains on SIGTERM.
func TestMetricsAndSIGTERM(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out bytes.Buffer
	cmd := exec.Command(stack.Binary(t, "FNRUNNER_GATEWAY"), "--port=0", "--metrics-address="+addr, "--config-address=127.0.0.1:1", "--binary-runner-address=127.0.0.1:1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var body string
	for i := 0; i < 250 && !strings.Contains(body, "go_goroutines"); i++ {
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	if !strings.Contains(body, "go_goroutines") {
		t.Errorf("no Go runtime metrics at /metrics:\n%.500s", body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("gateway exit after SIGTERM: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `"msg":"stopped"`) {
		t.Errorf("no drain log:\n%s", out.String())
	}
}

// With mutual TLS between the internal services, calls work end to end;
// porch still talks plaintext to the gateway.
func TestMutualTLSBetweenServices(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir(), "fnrunner")
	s := stack.Start(t, stack.Options{InternalArgs: certs.Args()})
	for _, executor := range []string{"set-namespace:v0.4.5", "apply-setters:v0.2.2"} {
		if _, err := call(t, s, executor, stack.Input, time.Minute); err != nil {
			t.Errorf("%s with mutual TLS: %v", executor, err)
		}
	}
}
