package setimage_test

import (
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-image/setimage"
)

// configMapConfig is a ConfigMap functionConfig with the given data lines.
func configMapConfig(data ...string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  " +
		strings.Join(data, "\n  ") + "\n"
}

// run runs set-image on items (YAML documents) with the functionConfig
// config (YAML, empty for none).
func run(t *testing.T, config, items string) (*fn.ResourceList, bool) {
	t.Helper()
	rl := &fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject()}
	if config != "" {
		fc, err := fn.ParseKubeObject([]byte(config))
		require.NoError(t, err)
		rl.FunctionConfig = fc
	}
	objs, err := fn.ParseKubeObjects([]byte(items))
	require.NoError(t, err)
	rl.Items = objs
	ok, err := setimage.Run(rl)
	require.NoError(t, err)
	return rl, ok
}

// summary is the result every successful run ends with.
func summary(n string) *fn.Result {
	return &fn.Result{Message: "summary: updated a total of " + n + " image(s)", Severity: fn.Info}
}

const pod = `apiVersion: v1
kind: Pod
metadata:
  name: app
  annotations:
    config.kubernetes.io/path: pod.yaml
spec:
  initContainers:
  - name: init
    image: nginx
  containers:
  - name: server
    image: nginx:1.20.2 # the web server
  - name: store
    image: postgres:14.1
  - name: other
    image: bitnami/nginx:1.0
  - name: prefix
    image: nginx-extra:1.0
`

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      initContainers:
      - name: init
        image: nginx:1.0@sha256:aaaa
      containers:
      - name: server
        image: "nginx@sha256:bbbb"
`

func TestRunUpdatesStandardImageFields(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		items   string
		want    string
		summary string
	}{{
		name:   "new name and tag in containers and init containers of a pod",
		config: configMapConfig("name: nginx", "newName: bitnami/nginx", "newTag: 1.21.4"),
		items:  pod,
		want: strings.NewReplacer(
			"image: nginx\n", "image: bitnami/nginx:1.21.4\n",
			"image: nginx:1.20.2 #", "image: bitnami/nginx:1.21.4 #",
		).Replace(pod),
		summary: "2",
	}, {
		name:   "new tag drops the digest, in a pod template",
		config: configMapConfig("name: nginx", "newTag: 1.21.4"),
		items:  deployment,
		want: strings.NewReplacer(
			"nginx:1.0@sha256:aaaa", "nginx:1.21.4",
			`"nginx@sha256:bbbb"`, `"nginx:1.21.4"`,
		).Replace(deployment),
		summary: "2",
	}, {
		name:   "digest replaces tag and digest",
		config: configMapConfig("name: nginx", "newName: bitnami/nginx", "digest: sha256:e1d6"),
		items:  deployment,
		want: strings.NewReplacer(
			"nginx:1.0@sha256:aaaa", "bitnami/nginx@sha256:e1d6",
			`"nginx@sha256:bbbb"`, `"bitnami/nginx@sha256:e1d6"`,
		).Replace(deployment),
		summary: "2",
	}, {
		name:   "new name keeps tag and digest",
		config: configMapConfig("name: nginx", "newName: mirror.example.com/nginx"),
		items:  deployment,
		want: strings.NewReplacer(
			"nginx:1.0@sha256:aaaa", "mirror.example.com/nginx:1.0@sha256:aaaa",
			`"nginx@sha256:bbbb"`, `"mirror.example.com/nginx@sha256:bbbb"`,
		).Replace(deployment),
		summary: "2",
	}, {
		name:    "an image already set is not counted",
		config:  configMapConfig("name: postgres", "newTag: '14.1'"),
		items:   pod,
		want:    pod,
		summary: "0",
	}, {
		name:   "fields outside the standard paths are left alone",
		config: configMapConfig("name: nginx", "newTag: '2'"),
		items: `apiVersion: batch/v1
kind: CronJob
metadata:
  name: job
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: c
            image: nginx:1
`,
		summary: "0",
	}, {
		name:   "custom resource definitions are skipped",
		config: configMapConfig("name: nginx", "newTag: '2'"),
		items: `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crd
spec:
  containers:
  - image: nginx:1
`,
		summary: "0",
	}, {
		name: "SetImage config with additional image fields",
		config: `apiVersion: fn.kpt.dev/v1alpha1
kind: SetImage
metadata:
  name: my-func-config
image:
  name: nginx
  newName: bitnami/nginx
  newTag: 1.21.4
additionalImageFields:
- group: dev.example.com
  version: v1
  kind: MyKind
  path: spec/manifest/images[]/image
`,
		items: `apiVersion: dev.example.com/v1
kind: MyKind
metadata:
  name: the-resource
spec:
  manifest:
    images:
    - image: nginx:1.20.2 # pinned
    - image: postgres:14.1
---
apiVersion: dev.example.com/v1
kind: OtherKind
metadata:
  name: other
spec:
  manifest:
    images:
    - image: nginx:1.20.2
`,
		want: `apiVersion: dev.example.com/v1
kind: MyKind
metadata:
  name: the-resource
spec:
  manifest:
    images:
    - image: bitnami/nginx:1.21.4 # pinned
    - image: postgres:14.1
---
apiVersion: dev.example.com/v1
kind: OtherKind
metadata:
  name: other
spec:
  manifest:
    images:
    - image: nginx:1.20.2
`,
		summary: "1",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = tt.items
			}
			rl, ok := run(t, tt.config, tt.items)
			require.True(t, ok, "results: %v", rl.Results)
			assert.Equal(t, strings.TrimSpace(want), rl.Items.String())
			assert.Equal(t, fn.Results{summary(tt.summary)}, rl.Results)
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		message string
	}{
		{"no config", "", "must specify `name`"},
		{"no name", configMapConfig("newTag: '1'"), "must specify `name`"},
		{"nothing to set", configMapConfig("name: nginx"), "must specify one of `newName`, `newTag`, or `digest`"},
		{"tag and digest", configMapConfig("name: nginx", "newTag: '1'", "digest: sha256:aa"), "must not specify both `newTag` and `digest`"},
		{"unknown ConfigMap key", configMapConfig("name: nginx", "newTag: '1'", "tag: '2'"), "ConfigMap has wrong field name tag"},
		{"name that is no expression", configMapConfig("name: 'ngin(x'", "newTag: '1'"), "invalid image `name` \"ngin(x\": error parsing regexp: missing closing ): `^ngin(x(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9_.{}-]*)?$`"},
		{"SetImage without image", "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetImage\nmetadata:\n  name: c\n", "must specify `name`"},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Other\nmetadata:\n  name: c\n", "unknown FunctionConfig `Other.example.com`, expect `SetImage.fn.kpt.dev` or `ConfigMap.v1`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, pod)
			assert.False(t, ok)
			assert.Equal(t, fn.Results{{Message: tt.message, Severity: fn.Error}}, rl.Results)
			assert.Equal(t, strings.TrimSpace(pod), rl.Items.String(), "items must be unchanged")
		})
	}
}

func TestRunReportsResourceItCannotUpdate(t *testing.T) {
	broken := `apiVersion: v1
kind: Pod
metadata:
  name: broken
  namespace: ns
  annotations:
    config.kubernetes.io/path: broken.yaml
    config.kubernetes.io/index: '1'
spec:
  containers:
  - name: c
    image:
      name: nginx
`
	rl, ok := run(t, configMapConfig("name: nginx", "newTag: '2'"), pod+"---\n"+broken)
	assert.False(t, ok)
	require.Len(t, rl.Results, 2)
	got := rl.Results[0]
	assert.Equal(t, fn.Error, got.Severity)
	assert.Contains(t, got.Message, `set image "nginx"`)
	assert.Equal(t, &fn.ResourceRef{APIVersion: "v1", Kind: "Pod", Name: "broken", Namespace: "ns"}, got.ResourceRef)
	assert.Equal(t, &fn.File{Path: "broken.yaml", Index: 1}, got.File)
	assert.Equal(t, summary("2"), rl.Results[1], "the other resource is still updated")
	assert.Contains(t, rl.Items[0].String(), "image: nginx:2 # the web server")
	assert.Equal(t, strings.TrimSpace(broken), strings.TrimSpace(rl.Items[1].String()))
}
