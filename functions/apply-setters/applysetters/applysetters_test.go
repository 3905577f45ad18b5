package applysetters_test

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/apply-setters/applysetters"
)

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

// run runs the function as its binary's main does.
func run(t *testing.T, data string) string {
	t.Helper()
	out, err := fn.Run(fn.ResourceListProcessorFunc(applysetters.Run), []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+deployment+
		"functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n"+data))
	require.NoError(t, err)
	return string(out)
}

func TestApplySetters(t *testing.T) {
	out := run(t, "    replicas: \"3\"\n")
	assert.Contains(t, out, "replicas: 3 # kpt-set: ${replicas}", "setter not applied")
	assert.Contains(t, out, `set field value to "3"`, "setter not reported")
	out = run(t, "    other: x\n")
	assert.Contains(t, out, "no matches for input setter(s)", "no-match case")
}
