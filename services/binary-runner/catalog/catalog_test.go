package catalog

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run runs a linked-in function as the go executor does.
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
    replicas: 1
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

// Functions whose work their input does not bound never run in the
// binary-runner's process: each entry names its binary and links nothing
// (their behaviour is the conformance corpus's and tests/faults' to check).
// starlark runs user scripts; apply-setters and apply-replacements multiply
// one value into as many places as reference it.
func TestUnboundedFunctionsRunOutOfProcess(t *testing.T) {
	for _, id := range []string{"starlark", "apply-setters", "apply-replacements"} {
		f, ok := Functions()[id]
		require.True(t, ok, id)
		assert.Equal(t, id, f.Binary, id)
		assert.Nil(t, f.Process, id)
	}
}
