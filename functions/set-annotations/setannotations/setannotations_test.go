package setannotations_test

import (
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

const (
	// configMapConfig sets color=orange and fruit=apple through a ConfigMap.
	configMapConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: my-config
data:
  fruit: apple
  color: orange
`
	// setAnnotationsConfig sets the same annotations through a
	// SetAnnotations.
	setAnnotationsConfig = `apiVersion: fn.kpt.dev/v1alpha1
kind: SetAnnotations
metadata:
  name: my-config
annotations:
  fruit: apple
  color: orange
`
	// configMapItem is a resource of file cm.yaml with no annotations
	// field but its own.
	configMapItem = `apiVersion: v1
kind: ConfigMap
metadata:
  name: the-map
  annotations:
    config.kubernetes.io/path: cm.yaml
    internal.config.kubernetes.io/path: cm.yaml
data:
  some-key: some-value
`
	// annotatedConfigMapItem is configMapItem after set-annotations.
	annotatedConfigMapItem = `apiVersion: v1
kind: ConfigMap
metadata:
  name: the-map
  annotations:
    config.kubernetes.io/path: cm.yaml
    internal.config.kubernetes.io/path: cm.yaml
    color: orange
    fruit: apple
data:
  some-key: some-value
`
	// applied is the message of a result for the two annotations.
	applied = `set annotations: {"color":"orange","fruit":"apple"}`
)

// run runs setannotations.Run on items (YAML documents) with config (none
// if empty) and returns the success, the items as YAML and the results.
func run(t *testing.T, config, items string) (ok bool, out []string, results fn.Results) {
	t.Helper()
	rl := &fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject()}
	if config != "" {
		c, err := fn.ParseKubeObject([]byte(config))
		require.NoError(t, err)
		rl.FunctionConfig = c
	}
	rl.Items = parse(t, items)
	ok, err := setannotations.Run(rl)
	require.NoError(t, err)
	for _, o := range rl.Items {
		out = append(out, o.String())
	}
	return ok, out, rl.Results
}

// parse parses YAML documents.
func parse(t *testing.T, items string) fn.KubeObjects {
	t.Helper()
	if items == "" {
		return nil
	}
	objs, err := fn.ParseKubeObjects([]byte(items))
	require.NoError(t, err)
	return objs
}

// reformat returns items (YAML documents) as Run returns them when it
// leaves them alone.
func reformat(t *testing.T, items string) []string {
	t.Helper()
	var out []string
	for _, o := range parse(t, items) {
		out = append(out, o.String())
	}
	return out
}

// result is a result of Run for an annotations field.
func result(message, field, file string, index int) *fn.Result {
	return &fn.Result{Message: message, Field: &fn.Field{Path: field}, File: &fn.File{Path: file, Index: index}}
}

// failure is Run's result for an error.
func failure(message string) *fn.Result {
	return &fn.Result{Severity: fn.Error, Message: message}
}

func TestRunConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		items   string
		wantOK  bool
		want    []string // items after the run; nil: unchanged
		results fn.Results
	}{{
		name:    "ConfigMap data",
		config:  configMapConfig,
		items:   configMapItem,
		wantOK:  true,
		want:    []string{annotatedConfigMapItem},
		results: fn.Results{result(applied, "metadata.annotations", "cm.yaml", 0)},
	}, {
		name:    "SetAnnotations annotations",
		config:  setAnnotationsConfig,
		items:   configMapItem,
		wantOK:  true,
		want:    []string{annotatedConfigMapItem},
		results: fn.Results{result(applied, "metadata.annotations", "cm.yaml", 0)},
	}, {
		name:    "legacy kind SetAnnotationConfig",
		config:  strings.Replace(setAnnotationsConfig, "SetAnnotations", "SetAnnotationConfig", 1),
		items:   configMapItem,
		wantOK:  true,
		want:    []string{annotatedConfigMapItem},
		results: fn.Results{result(applied, "metadata.annotations", "cm.yaml", 0)},
	}, {
		name:    "values are set as strings",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  enabled: \"true\"\n",
		items:   "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns\n",
		wantOK:  true,
		want:    []string{"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns\n  annotations:\n    enabled: \"true\"\n"},
		results: fn.Results{result(`set annotations: {"enabled":"true"}`, "metadata.annotations", "", 0)},
	}, {
		name:    "local config is annotated too",
		config:  configMapConfig,
		items:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
		wantOK:  true,
		want:    []string{"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n    color: orange\n    fruit: apple\n"},
		results: fn.Results{result(applied, "metadata.annotations", "", 0)},
	}, {
		name:    "no resources",
		config:  configMapConfig,
		wantOK:  true,
		results: fn.Results{{Message: "no annotations applied"}},
	}, {
		name:    "no functionConfig",
		items:   configMapItem,
		results: fn.Results{failure("failed to configure function: `functionConfig` must be a `ConfigMap` or `SetAnnotations`")},
	}, {
		name:    "SetAnnotations of another version",
		config:  strings.Replace(setAnnotationsConfig, "v1alpha1", "v1", 1),
		items:   configMapItem,
		results: fn.Results{failure("failed to configure function: `functionConfig` must be a `ConfigMap` or `SetAnnotations`")},
	}, {
		name:    "kpt's placeholder ConfigMap without data",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata: {}\n",
		items:   configMapItem,
		results: fn.Results{failure("failed to configure function: input annotation list cannot be empty")},
	}, {
		name:    "ConfigMap without data",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: my-config\n",
		items:   configMapItem,
		results: fn.Results{failure("failed to configure function: input annotation list cannot be empty")},
	}, {
		name:    "both fieldSpecs and additionalAnnotationFields",
		config:  setAnnotationsConfig + "fieldSpecs:\n- path: spec/a\nadditionalAnnotationFields:\n- path: spec/b\n",
		items:   configMapItem,
		results: fn.Results{failure("failed to configure function: `fieldSpecs` has been deprecated, please rename it to `additionalAnnotationFields`")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, out, results := run(t, tt.config, tt.items)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.results, results)
			want := tt.want
			if want == nil {
				want = reformat(t, tt.items)
			}
			assert.Equal(t, want, out)
		})
	}
}

// TestRunFailures covers failures whose messages quote kustomize's and
// encoding/json's own: only their start is checked.
func TestRunFailures(t *testing.T) {
	tests := []struct {
		name   string
		config string
		items  string
		prefix string
	}{{
		name:   "additionalAnnotationFields not a list",
		config: setAnnotationsConfig + "additionalAnnotationFields: {}\n",
		items:  configMapItem,
		prefix: `failed to configure function: failed to unmarshal config "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetAnnotations\n`,
	}, {
		name:   "resource without a name",
		config: configMapConfig,
		items:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: ns\n",
		prefix: "failed to run function: missing metadata.name in object ",
	}, {
		name:   "resource without a kind",
		config: configMapConfig,
		items:  "apiVersion: v1\nmetadata:\n  name: x\n",
		prefix: "failed to run function: missing kind in object ",
	}, {
		name:   "two resources with the same id",
		config: configMapConfig,
		items:  configMapItem + "---\n" + configMapItem,
		prefix: "failed to run function: may not add resource with an already registered id: ConfigMap.v1.[noGrp]/the-map.",
	}, {
		name:   "a field to create under a scalar",
		config: setAnnotationsConfig + "additionalAnnotationFields:\n- path: data/some-key/annotations\n  create: true\n",
		items:  configMapItem,
		prefix: "failed to run function: failed to run transformer: considering field 'data/some-key/annotations' of object ConfigMap.v1.[noGrp]/the-map.",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, out, results := run(t, tt.config, tt.items)
			assert.False(t, ok)
			require.Len(t, results, 1)
			assert.Equal(t, fn.Error, results[0].Severity)
			assert.True(t, strings.HasPrefix(results[0].Message, tt.prefix), "message %q should start with %q", results[0].Message, tt.prefix)
			assert.Equal(t, reformat(t, tt.items), out, "items are left alone")
		})
	}
}

func TestRunFields(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		in      string
		want    string
		results fn.Results
	}{{
		name:   "Deployment: pod template",
		config: setAnnotationsConfig,
		in: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  annotations:
    config.kubernetes.io/path: d.yaml
    config.kubernetes.io/index: '1'
spec:
  template:
    spec: {}
`,
		want: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  annotations:
    config.kubernetes.io/path: d.yaml
    config.kubernetes.io/index: '1'
    color: orange
    fruit: apple
spec:
  template:
    spec: {}
    metadata:
      annotations:
        color: orange
        fruit: apple
`,
		results: fn.Results{
			result(applied, "metadata.annotations", "d.yaml", 1),
			result(applied, "spec.template.metadata.annotations", "d.yaml", 1),
		},
	}, {
		name:   "CronJob: job template and its pod template",
		config: configMapConfig,
		in: `apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
  annotations:
    color: red
`,
		want: `apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
  annotations:
    color: orange
    fruit: apple
spec:
  jobTemplate:
    metadata:
      annotations:
        color: orange
        fruit: apple
    spec:
      template:
        metadata:
          annotations:
            color: orange
            fruit: apple
`,
		results: fn.Results{
			result(applied, "metadata.annotations", "", 0),
			result(applied, "spec.jobTemplate.metadata.annotations", "", 0),
			result(applied, "spec.jobTemplate.spec.template.metadata.annotations", "", 0),
		},
	}, {
		name:   "Job of another group: metadata only",
		config: configMapConfig,
		in:     "apiVersion: example.com/v1\nkind: Job\nmetadata:\n  name: j\n",
		want:   "apiVersion: example.com/v1\nkind: Job\nmetadata:\n  name: j\n  annotations:\n    color: orange\n    fruit: apple\n",
		results: fn.Results{
			result(applied, "metadata.annotations", "", 0),
		},
	}, {
		name: "additional fields, created or updated only",
		config: setAnnotationsConfig + `additionalAnnotationFields:
- kind: MyResource
  group: dev.example.com
  path: spec/selector/annotations
  create: true
- kind: MyResource
  path: spec/other/annotations
- kind: MyResource
  path: spec/items/annotations
`,
		in: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: r
spec:
  items:
  - annotations:
      color: red
  - name: b
`,
		want: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: r
  annotations:
    color: orange
    fruit: apple
spec:
  items:
  - annotations:
      color: orange
      fruit: apple
  - name: b
  selector:
    annotations:
      color: orange
      fruit: apple
`,
		results: fn.Results{
			result(applied, "metadata.annotations", "", 0),
			result(applied, "spec.items.annotations", "", 0),
			result(applied, "spec.selector.annotations", "", 0),
		},
	}, {
		name:   "deprecated fieldSpecs",
		config: setAnnotationsConfig + "fieldSpecs:\n- path: data/selector/annotations\n  create: true\n",
		in:     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n",
		want:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    color: orange\n    fruit: apple\ndata:\n  selector:\n    annotations:\n      color: orange\n      fruit: apple\n",
		results: fn.Results{
			result(applied, "data.selector.annotations", "", 0),
			result(applied, "metadata.annotations", "", 0),
		},
	}, {
		name:   "results sorted by file and index",
		config: configMapConfig,
		in: `apiVersion: v1
kind: Namespace
metadata:
  name: b
  annotations:
    config.kubernetes.io/path: b.yaml
---
apiVersion: v1
kind: Namespace
metadata:
  name: a2
  annotations:
    config.kubernetes.io/path: a.yaml
    config.kubernetes.io/index: '1'
---
apiVersion: v1
kind: Namespace
metadata:
  name: a1
  annotations:
    config.kubernetes.io/path: a.yaml
`,
		want: `apiVersion: v1
kind: Namespace
metadata:
  name: b
  annotations:
    config.kubernetes.io/path: b.yaml
    color: orange
    fruit: apple
---
apiVersion: v1
kind: Namespace
metadata:
  name: a2
  annotations:
    config.kubernetes.io/path: a.yaml
    config.kubernetes.io/index: '1'
    color: orange
    fruit: apple
---
apiVersion: v1
kind: Namespace
metadata:
  name: a1
  annotations:
    config.kubernetes.io/path: a.yaml
    color: orange
    fruit: apple
`,
		results: fn.Results{
			result(applied, "metadata.annotations", "a.yaml", 0),
			result(applied, "metadata.annotations", "a.yaml", 1),
			result(applied, "metadata.annotations", "b.yaml", 0),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, out, results := run(t, tt.config, tt.in)
			require.True(t, ok, "results: %v", results)
			assert.Equal(t, tt.want, strings.Join(out, "---\n"))
			assert.Equal(t, tt.results, results)
		})
	}
}
