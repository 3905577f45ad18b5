package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnrunner/fnrunner/tests/stack"
)

const resources = `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: old
data:
  k: v
`

func fnctl(t *testing.T, s *stack.Stack, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{args[0], "--gateway=" + s.GatewayAddress}, args[1:]...)
	err := run(context.Background(), full, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestEvalAndRender(t *testing.T) {
	s := stack.Start(t, stack.Options{})

	out, log, err := fnctl(t, s, resources, "eval", "--image=set-namespace:v0.4.5", "--", "namespace=prod")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, log)
	}
	if !strings.Contains(out, "namespace: prod") || strings.Contains(out, "kind: ResourceList") || !strings.Contains(log, "[PASS] set-namespace:v0.4.5") {
		t.Errorf("eval of a stream: stdout:\n%s\nstderr:\n%s", out, log)
	}

	list := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n"
	cfg := filepath.Join(t.TempDir(), "fn.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  namespace: staging\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, log, err = fnctl(t, s, list, "eval", "--image=set-namespace:v0.4.5", "--fn-config="+cfg)
	if err != nil || !strings.Contains(out, "kind: ResourceList") || !strings.Contains(out, "namespace: staging") {
		t.Errorf("eval of a ResourceList: %v\n%s\n%s", err, out, log)
	}

	_, log, err = fnctl(t, s, resources, "eval", "--image=no-such-function:v1")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(log, "NotFound") {
		t.Errorf("eval of an unknown image: %v\n%s", err, log)
	}

	pkg := t.TempDir()
	for name, content := range map[string]string{
		"Kptfile":        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\npipeline:\n  mutators:\n  - image: set-namespace:v0.4.5\n    configMap:\n      namespace: rendered\n",
		"resources.yaml": resources,
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, log, err = fnctl(t, s, "", "render", pkg)
	if err != nil {
		t.Fatalf("render: %v\n%s", err, log)
	}
	got, _ := os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	if !strings.Contains(string(got), "namespace: rendered") || !strings.Contains(log, "Successfully executed 1 function(s)") || !strings.Contains(log, "[1/1] set-namespace:v0.4.5: ok in") {
		t.Errorf("render wrote:\n%s\nand printed:\n%s", got, log)
	}
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), nil, nil, &out, &out); !errors.As(err, new(exitError)) || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("no args: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"eval", "--help"}, nil, &out, &out); err != nil || !strings.Contains(out.String(), "-fn-config") {
		t.Errorf("eval --help: %v\n%s", err, out.String())
	}
}
