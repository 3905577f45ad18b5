package catalog

import (
	"fmt"
	"strings"
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

// Functions whose work their input does not bound never run in the
// binary-runner's process: each entry names its binary and links nothing
// (their behaviour is the conformance corpus's and tests/faults' to check).
// starlark runs user scripts; apply-replacements copies one value into as
// many targets as its selectors match.
func TestUnboundedFunctionsRunOutOfProcess(t *testing.T) {
	for _, id := range []string{"starlark", "apply-replacements"} {
		f, ok := Functions()[id]
		require.True(t, ok, id)
		assert.Equal(t, id, f.Binary, id)
		assert.Nil(t, f.Process, id)
	}
}

// apply-setters' amplifications are refused before it runs: one value
// referenced many times, setters naming each other (the pattern doubles
// with each), and one long pattern matched against one long value.
func TestApplySettersRefusesWorkItsInputDoesNotWarrant(t *testing.T) {
	config := func(data map[string]string) string {
		var b strings.Builder
		b.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: f\n  data:\n")
		for k, v := range data {
			fmt.Fprintf(&b, "    %s: %q\n", k, v)
		}
		return b.String()
	}
	head := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n"
	var refs strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&refs, "    k%d: x # kpt-set: ${big}\n", i)
	}
	// Each names them all: whatever order the function takes them in
	// (its functionConfig's data, a map), each multiplies the pattern.
	var all strings.Builder
	for i := range 40 {
		fmt.Fprintf(&all, "${s%02d}", i)
	}
	chain := map[string]string{}
	for i := range 40 {
		chain[fmt.Sprintf("s%02d", i)] = all.String()
	}
	long := strings.Repeat("${a}", 30000)
	tests := []struct {
		name  string
		input string
	}{
		{"one value, many references", head + refs.String() + config(map[string]string{"big": strings.Repeat("v", 100000)})},
		{"setters naming each other", head + "    k: x # kpt-set: ${s00}\n" + config(chain)},
		{"a long pattern against a long value", head + "    k: " + strings.Repeat("y", 200000) + " # kpt-set: " + long + "\n" + config(map[string]string{"b": "1"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Less(t, len(tt.input), 400<<10)
			out, err := run(t, "apply-setters", tt.input)
			require.Error(t, err)
			assert.Contains(t, out, "too much work for the input")
		})
	}
}
