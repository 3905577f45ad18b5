package catalog

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func run(t *testing.T, id, input string) (string, error) {
	t.Helper()
	f, ok := Functions()[id]
	require.True(t, ok, "no function %q", id)
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
	require.NoError(t, err)
	assert.Contains(t, out, "namespace: prod", "namespace not set")
	assert.NotContains(t, out, "namespace: old", "namespace not set")
}

func TestApplySetters(t *testing.T) {
	out, err := run(t, "apply-setters", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    replicas: \"3\"\n")
	require.NoError(t, err)
	assert.Contains(t, out, "replicas: 3 # kpt-set: ${replicas}", "setter not applied")
	assert.Contains(t, out, `set field value to "3"`, "setter not reported")
	out, err = run(t, "apply-setters", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    other: x\n")
	assert.NoError(t, err, "no-match case")
	assert.Contains(t, out, "no matches for input setter(s)", "no-match case")
}

// starlark runs user scripts, so it never runs in the binary-runner's
// process: its entry names its binary and links nothing (its behaviour is
// the conformance corpus's and tests/faults' to check).
func TestStarlarkRunsOutOfProcess(t *testing.T) {
	f, ok := Functions()["starlark"]
	require.True(t, ok)
	assert.Equal(t, "starlark", f.Binary)
	assert.Nil(t, f.Process)
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
	require.NoError(t, err)
	assert.Contains(t, out, "image: nginx:1.27", "replacement not applied")
}
