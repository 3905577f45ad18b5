package setlabels_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/set-labels/setlabels"
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
	// setLabelsConfig sets the same labels through a SetLabels.
	setLabelsConfig = `apiVersion: fn.kpt.dev/v1alpha1
kind: SetLabels
metadata:
  name: my-config
labels:
  fruit: apple
  color: orange
`
	// configMapItem is a resource with no label field but its own.
	configMapItem = `apiVersion: v1
kind: ConfigMap
metadata:
  name: the-map
data:
  some-key: some-value
`
	// labelledConfigMapItem is configMapItem after set-labels.
	labelledConfigMapItem = `apiVersion: v1
kind: ConfigMap
metadata:
  name: the-map
  labels:
    color: orange
    fruit: apple
data:
  some-key: some-value
`
)

// run runs setlabels.Run on items (YAML documents) with config (none if
// empty) and returns the success, the items as YAML and the results'
// severities and messages.
func run(t *testing.T, config, items string) (ok bool, out []string, results []string) {
	t.Helper()
	rl := &fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject()}
	if config != "" {
		c, err := fn.ParseKubeObject([]byte(config))
		require.NoError(t, err)
		rl.FunctionConfig = c
	}
	if items != "" {
		objs, err := fn.ParseKubeObjects([]byte(items))
		require.NoError(t, err)
		rl.Items = objs
	}
	ok, err := setlabels.Run(rl)
	require.NoError(t, err)
	for _, o := range rl.Items {
		out = append(out, o.String())
	}
	for _, r := range rl.Results {
		results = append(results, string(r.Severity)+": "+r.Message)
	}
	return ok, out, results
}

// reformat returns items (YAML documents) as Run returns them when it
// leaves them alone.
func reformat(t *testing.T, items string) []string {
	t.Helper()
	if items == "" {
		return nil
	}
	objs, err := fn.ParseKubeObjects([]byte(items))
	require.NoError(t, err)
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.String())
	}
	return out
}

func TestRunConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		items   string
		wantOK  bool
		want    []string // items after the run; nil: unchanged
		results []string
	}{{
		name:    "ConfigMap data",
		config:  configMapConfig,
		items:   configMapItem,
		wantOK:  true,
		want:    []string{labelledConfigMapItem},
		results: []string{"info: set 2 labels in total"},
	}, {
		name:    "SetLabels labels",
		config:  setLabelsConfig,
		items:   configMapItem,
		wantOK:  true,
		want:    []string{labelledConfigMapItem},
		results: []string{"info: set 2 labels in total"},
	}, {
		name:    "SetLabels of another version of the group",
		config:  strings.Replace(setLabelsConfig, "v1alpha1", "v1", 1),
		items:   configMapItem,
		wantOK:  true,
		want:    []string{labelledConfigMapItem},
		results: []string{"info: set 2 labels in total"},
	}, {
		name:    "kpt's ConfigMap from arguments",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  color: orange\n  fruit: apple\n",
		items:   configMapItem,
		wantOK:  true,
		want:    []string{labelledConfigMapItem},
		results: []string{"info: set 2 labels in total"},
	}, {
		name:    "no functionConfig",
		items:   configMapItem,
		wantOK:  false,
		results: []string{"info: `FunctionConfig` is not given"},
	}, {
		name:    "kpt's placeholder ConfigMap without data",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata: {}\n",
		items:   configMapItem,
		wantOK:  false,
		results: []string{"info: `FunctionConfig` is not given"},
	}, {
		name:    "no functionConfig and no resources",
		wantOK:  true,
		results: []string{"info: `FunctionConfig` is not given", "info: no input resources"},
	}, {
		name:    "only local config",
		config:  configMapConfig,
		items:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
		wantOK:  true,
		results: []string{"info: no input resources"},
	}, {
		name:    "SetLabels without labels",
		config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetLabels\nmetadata:\n  name: my-config\n",
		items:   configMapItem,
		wantOK:  true,
		results: []string{"warning: no `labels` arguments are given in FunctionConfig"},
	}, {
		name:    "ConfigMap without data",
		config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: my-config\n",
		items:   configMapItem,
		wantOK:  true,
		results: []string{"warning: no `labels` arguments are given in FunctionConfig"},
	}, {
		name:    "unknown kind",
		config:  "apiVersion: example.com/v1\nkind: Labels\nmetadata:\n  name: my-config\nlabels:\n  color: orange\n",
		items:   configMapItem,
		wantOK:  false,
		results: []string{"error: unknown FunctionConfig `Labels.example.com`, expect `SetLabels.fn.kpt.dev` or `ConfigMap.v1`"},
	}, {
		name:    "SetLabels kind in another group",
		config:  "apiVersion: example.com/v1alpha1\nkind: SetLabels\nmetadata:\n  name: my-config\nlabels:\n  color: orange\n",
		items:   configMapItem,
		wantOK:  false,
		results: []string{"error: unknown FunctionConfig `SetLabels.example.com`, expect `SetLabels.fn.kpt.dev` or `ConfigMap.v1`"},
	}, {
		name:   "labels not a map",
		config: "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetLabels\nmetadata:\n  name: my-config\nlabels:\n- color\n",
		items:  configMapItem,
		wantOK: false,
		results: []string{"error: unable to convert object to *setlabels.SetLabels with error: " +
			"json: cannot unmarshal array into Go struct field SetLabels.labels of type map[string]string"},
	}, {
		// The SDK does not fill in the apiVersion of the message.
		name:    "existing label that is not a string",
		config:  configMapConfig,
		items:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: the-map\n  labels:\n    color: 1\n",
		wantOK:  false,
		results: []string{`error: Resource(apiVersion=, kind=ConfigMap) has unmatched field type "string" in fieldpath .metadata.labels.color`, "info: set 0 labels in total"},
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

func TestRunFields(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  string
		count int // the labels the result says were set
	}{{
		name: "a replaced value is written plain, its comment kept, as the releases write it",
		in: `apiVersion: v1
kind: Service
metadata:
  name: svc
  labels:
    color: "blue" # the team's
    fruit: 'apple'
spec:
  selector:
    color: 'blue'
`,
		want: `apiVersion: v1
kind: Service
metadata:
  name: svc
  labels:
    color: orange # the team's
    fruit: 'apple'
spec:
  selector:
    color: orange
    fruit: apple
`,
		count: 4,
	}, {
		name: "Service: selector created",
		in: `apiVersion: v1
kind: Service
metadata:
  name: svc
spec:
  ports:
  - port: 80
`,
		want: `apiVersion: v1
kind: Service
metadata:
  name: svc
  labels:
    color: orange
    fruit: apple
spec:
  ports:
  - port: 80
  selector:
    color: orange
    fruit: apple
`,
		count: 4,
	}, {
		name: "Service of another group with version v1, matched like the catalog",
		in: `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: svc
`,
		want: `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: svc
  labels:
    color: orange
    fruit: apple
spec:
  selector:
    color: orange
    fruit: apple
`,
		count: 4,
	}, {
		name: "ReplicationController: selector and pod template",
		in: `apiVersion: v1
kind: ReplicationController
metadata:
  name: rc
spec:
  selector:
    color: red
  template:
    metadata:
      name: pod
`,
		want: `apiVersion: v1
kind: ReplicationController
metadata:
  name: rc
  labels:
    color: orange
    fruit: apple
spec:
  selector:
    color: orange
    fruit: apple
  template:
    metadata:
      name: pod
      labels:
        color: orange
        fruit: apple
`,
		count: 6,
	}, {
		name: "Deployment: matchLabels and template created, pod spec selectors updated only",
		in: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
spec:
  template:
    spec:
      topologySpreadConstraints:
      - labelSelector:
          matchLabels:
            color: red
            app: d
      - labelSelector:
          matchLabels:
            app: d
`,
		want: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  labels:
    color: orange
    fruit: apple
spec:
  template:
    spec:
      topologySpreadConstraints:
      - labelSelector:
          matchLabels:
            color: orange
            app: d
      - labelSelector:
          matchLabels:
            app: d
    metadata:
      labels:
        color: orange
        fruit: apple
  selector:
    matchLabels:
      color: orange
      fruit: apple
`,
		count: 10,
	}, {
		name: "pod affinity terms are looked up under affinity itself, as in the catalog",
		in: `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ds
spec:
  template:
    spec:
      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels:
                color: red
        podAntiAffinity: {}
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchLabels:
              color: red
        preferredDuringSchedulingIgnoredDuringExecution:
        - podAffinityTerm:
            labelSelector:
              matchLabels:
                fruit: pear
`,
		want: `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ds
  labels:
    color: orange
    fruit: apple
spec:
  template:
    spec:
      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels:
                color: red
        podAntiAffinity: {}
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchLabels:
              color: orange
        preferredDuringSchedulingIgnoredDuringExecution:
        - podAffinityTerm:
            labelSelector:
              matchLabels:
                fruit: apple
    metadata:
      labels:
        color: orange
        fruit: apple
  selector:
    matchLabels:
      color: orange
      fruit: apple
`,
		// metadata, selector, template, and both terms twice (once
		// for podAffinity, once for podAntiAffinity): 2 * 7.
		count: 14,
	}, {
		name: "Job and PodDisruptionBudget: matchLabels updated only",
		in: `apiVersion: batch/v1
kind: Job
metadata:
  name: j
spec:
  selector:
    matchLabels:
      name: pi
  template:
    metadata:
      labels:
        color: pi
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: pdb
spec:
  selector:
    matchLabels:
      fruit: pear
`,
		want: `apiVersion: batch/v1
kind: Job
metadata:
  name: j
  labels:
    color: orange
    fruit: apple
spec:
  selector:
    matchLabels:
      name: pi
  template:
    metadata:
      labels:
        color: orange
        fruit: apple
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: pdb
  labels:
    color: orange
    fruit: apple
spec:
  selector:
    matchLabels:
      fruit: apple
`,
		count: 10,
	}, {
		name: "CronJob: job template and its pod template",
		in: `apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
spec:
  jobTemplate:
    spec:
      selector:
        matchLabels:
          color: red
      template:
        spec:
          restartPolicy: Never
`,
		want: `apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
  labels:
    color: orange
    fruit: apple
spec:
  jobTemplate:
    spec:
      selector:
        matchLabels:
          color: orange
      template:
        spec:
          restartPolicy: Never
        metadata:
          labels:
            color: orange
            fruit: apple
    metadata:
      labels:
        color: orange
        fruit: apple
`,
		count: 8,
	}, {
		name: "StatefulSet: volume claim templates",
		in: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  volumeClaimTemplates:
  - metadata:
      name: www
    selector:
      matchLabels:
        fruit: pear
    spec:
      selector:
        matchLabels:
          fruit: pear
`,
		want: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  labels:
    color: orange
    fruit: apple
spec:
  volumeClaimTemplates:
  - metadata:
      name: www
      labels:
        color: orange
        fruit: apple
    selector:
      matchLabels:
        fruit: apple
    spec:
      selector:
        matchLabels:
          fruit: pear
  selector:
    matchLabels:
      color: orange
      fruit: apple
`,
		count: 8,
	}, {
		name: "an error in the pod template is dropped, with the rest of the resource, as in the catalog",
		in: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  template:
    metadata:
      labels: none
  volumeClaimTemplates:
  - metadata:
      name: www
`,
		want: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  labels:
    color: orange
    fruit: apple
spec:
  template:
    metadata:
      labels: none
  volumeClaimTemplates:
  - metadata:
      name: www
  selector:
    matchLabels:
      color: orange
      fruit: apple
`,
		count: 4,
	}, {
		name: "NetworkPolicy: pod selectors updated only",
		in: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: np
spec:
  podSelector:
    matchLabels:
      color: red
  ingress:
  - from:
    - podSelector:
        matchLabels:
          color: red
    - namespaceSelector:
        matchLabels:
          color: red
  egress:
  - to:
    - podSelector:
        matchLabels:
          fruit: pear
`,
		want: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: np
  labels:
    color: orange
    fruit: apple
spec:
  podSelector:
    matchLabels:
      color: orange
  ingress:
  - from:
    - podSelector:
        matchLabels:
          color: orange
    - namespaceSelector:
        matchLabels:
          color: red
  egress:
  - to:
    - podSelector:
        matchLabels:
          fruit: apple
`,
		count: 10,
	}, {
		name: "custom resource: metadata only",
		in: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: the-service
  labels:
    color: red
spec:
  selector:
    labels:
      color: red
`,
		want: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: the-service
  labels:
    color: orange
    fruit: apple
spec:
  selector:
    labels:
      color: red
`,
		count: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, out, results := run(t, setLabelsConfig, tt.in)
			require.True(t, ok, "results: %v", results)
			assert.Equal(t, tt.want, strings.Join(out, "---\n"))
			assert.Equal(t, []string{"info: set " + strconv.Itoa(tt.count) + " labels in total"}, results)
		})
	}
}

// A list where a map the function walks belongs is an error result naming
// the field; the SDK would read it as a map and, for a list of odd length,
// end the process.
func TestRunListForMap(t *testing.T) {
	for _, tc := range []struct{ field, in string }{
		{"spec", "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: d\nspec: [x]\n"},
		{"template", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template: [x]\n"},
		{"affinity", "apiVersion: v1\nkind: ReplicationController\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      affinity: [x]\n"},
		{"jobTemplate", "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: d\nspec:\n  jobTemplate: [a, b, c]\n"},
		{"podAffinityTerm", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      affinity:\n        podAffinity: {}\n        preferredDuringSchedulingIgnoredDuringExecution:\n        - podAffinityTerm: [x]\n"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			ok, _, results := run(t, setLabelsConfig, tc.in)
			assert.False(t, ok)
			assert.Contains(t, results, "error: "+tc.field+": a list where a map was expected")
		})
	}
}
