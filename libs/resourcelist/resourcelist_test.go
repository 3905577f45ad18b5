package resourcelist

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
)

const valid = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: a
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    namespace: prod
results:
- message: set namespace
  severity: info
- message: "bad field"
  severity: error
  resourceRef:
    apiVersion: v1
    kind: ConfigMap
    name: a
`

func TestParse(t *testing.T) {
	rl, err := Parse([]byte(valid))
	require.NoError(t, err)
	if assert.Len(t, rl.Items, 1, "items") {
		assert.Equal(t, "a", rl.Items[0].GetName(), "item name")
	}
	if assert.NotNil(t, rl.FunctionConfig, "functionConfig") {
		assert.Equal(t, "function-input", rl.FunctionConfig.GetName(), "functionConfig name")
	}
	require.Len(t, rl.Results, 2, "results")
	require.Equal(t, framework.Error, rl.Results[1].Severity, "results = %+v", rl.Results)
	got := ErrorSummary(rl.Results)
	assert.Contains(t, got, "bad field", "ErrorSummary")
	assert.NotContains(t, got, "set namespace", "ErrorSummary")
}

func TestParseEmptyLists(t *testing.T) {
	for _, in := range []string{
		"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n",
		"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
		"apiVersion: config.kubernetes.io/v1alpha1\nkind: ResourceList\nitems:\n",
	} {
		rl, err := Parse([]byte(in))
		if !assert.NoError(t, err, "Parse(%q)", in) {
			continue
		}
		assert.Empty(t, rl.Items, "Parse(%q) items", in)
		assert.Nil(t, rl.FunctionConfig, "Parse(%q) functionConfig", in)
		assert.Nil(t, rl.Results, "Parse(%q) results", in)
	}
}

func TestParseRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "",
		"blank":          "  \n\t",
		"not yaml":       "{{{ not: [yaml",
		"scalar":         "just a string",
		"list":           "- a\n- b\n",
		"other kind":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
		"bad apiVersion": "apiVersion: v1\nkind: ResourceList\n",
		"items not list": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: {a: b}\n",
		"item scalar":    "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [3]\n",
		"results scalar": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nresults: 7\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(in))
			assert.ErrorIs(t, err, ErrInvalid, "Parse(%q)", in)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"))
	f.Add([]byte("kind: ResourceList\nitems: [[]]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rl, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		require.NotNil(t, rl.Node, "nil node for a valid ResourceList")
		_ = ErrorSummary(rl.Results)
	})
}

// TestParseLegacyResults: the results forms kpt reads besides today's, as
// functions built on the legacy Go SDK (kyaml v0.10's framework) and the TS
// SDK write them.
func TestParseLegacyResults(t *testing.T) {
	for name, results := range map[string]string{
		"wrapped in items, ref under metadata": `results:
  name: legacy
  items:
  - message: replicas too high
    severity: error
    resourceRef:
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: web
        namespace: prod
    field:
      path: spec.replicas
      suggestedValue: 3
`,
		"a list, ref under metadata": `results:
- message: replicas too high
  severity: error
  resourceRef:
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
      namespace: prod
  field:
    path: spec.replicas
    suggestedValue: 3
`,
	} {
		t.Run(name, func(t *testing.T) {
			rl, err := Parse([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n" + results))
			require.NoError(t, err)
			require.Len(t, rl.Results, 1)
			r := rl.Results[0]
			assert.Equal(t, "replicas too high", r.Message)
			assert.Equal(t, framework.Error, r.Severity)
			if assert.NotNil(t, r.ResourceRef) {
				assert.Equal(t, "Deployment", r.ResourceRef.Kind)
				assert.Equal(t, "web", r.ResourceRef.Name)
				assert.Equal(t, "prod", r.ResourceRef.Namespace)
			}
			if assert.NotNil(t, r.Field) {
				assert.Equal(t, "spec.replicas", r.Field.Path)
				assert.NotNil(t, r.Field.ProposedValue, "suggestedValue becomes proposedValue")
			}
		})
	}
}
