package catalog

import (
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
)

func run(t *testing.T, id, input string) (string, error) {
	t.Helper()
	f, ok := Functions()[id]
	if !ok {
		t.Fatalf("no function %q", id)
	}
	out, err := fn.Run(f.Process, []byte(input))
	return string(out), err
}

const deployment = `- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
    namespace: old
  spec:
    replicas: 1 # kpt-set: ${replicas}
    template:
      spec:
        containers:
        - name: web
          image: nginx
`

func TestSetNamespace(t *testing.T) {
	out, err := run(t, "set-namespace", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    namespace: prod\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "namespace: prod") || strings.Contains(out, "namespace: old") {
		t.Errorf("namespace not set:\n%s", out)
	}
}

func TestApplySetters(t *testing.T) {
	out, err := run(t, "apply-setters", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    replicas: \"3\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "replicas: 3 # kpt-set: ${replicas}") || !strings.Contains(out, `set field value to "3"`) {
		t.Errorf("setter not applied or not reported:\n%s", out)
	}
	out, err = run(t, "apply-setters", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    other: x\n")
	if err != nil || !strings.Contains(out, "no matches for input setter(s)") {
		t.Errorf("no-match case: %v\n%s", err, out)
	}
}

func TestStarlark(t *testing.T) {
	out, err := run(t, "starlark", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+`functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: StarlarkRun
  metadata:
    name: label
  source: |
    for r in ctx.resource_list["items"]:
      r["metadata"]["labels"] = {"touched": "yes"}
`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "touched: \"yes\"") && !strings.Contains(out, "touched: yes") {
		t.Errorf("starlark did not run:\n%s", out)
	}
}

func TestApplyReplacements(t *testing.T) {
	out, err := run(t, "apply-replacements", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+`- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: source
  data:
    image: nginx:1.27
functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: ApplyReplacements
  metadata:
    name: r
  replacements:
  - source:
      kind: ConfigMap
      name: source
      fieldPath: data.image
    targets:
    - select:
        kind: Deployment
      fieldPaths:
      - spec.template.spec.containers.[name=web].image
`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "image: nginx:1.27") {
		t.Errorf("replacement not applied:\n%s", out)
	}
}
