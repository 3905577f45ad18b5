package setimage_test

import (
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/set-image/setimage"
)

// configMapConfig is a ConfigMap functionConfig with the given data lines.
func configMapConfig(data ...string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  " +
		strings.Join(data, "\n  ") + "\n"
}

// setImageConfig is a SetImage functionConfig with the given lines.
func setImageConfig(lines ...string) string {
	return "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetImage\nmetadata:\n  name: my-func-config\n" +
		strings.Join(lines, "\n") + "\n"
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

// terminated is how the catalog's function ends on a bad config: the error,
// then "function is terminated" with it.
func terminated(message string) fn.Results {
	return fn.Results{
		{Message: message, Severity: fn.Error},
		{Message: "function is terminated: " + message, Severity: fn.Error},
	}
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
    image: nginx:1.20.2
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
      - name: tagged
        image: nginx:1.20.2
      - name: digest
        image: "nginx@sha256:bbbb"
      - name: both
        image: nginx:1.0@sha256:aaaa
      - name: bare
        image: nginx
`

func TestRunUpdatesStandardImageFields(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		items   string
		want    string
		summary string
	}{{
		name:   "new name and tag in the containers of a pod, not its init containers",
		config: configMapConfig("name: nginx", "newName: bitnami/nginx", "newTag: 1.21.4"),
		items:  pod,
		want: strings.Replace(pod, "image: nginx:1.20.2 # the web server",
			"image: bitnami/nginx:1.21.4 # the web server", 1),
		summary: "1",
	}, {
		name:   "a field named iniContainers is updated",
		config: configMapConfig("name: nginx", "newTag: '2'"),
		items: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  iniContainers:
  - image: nginx:1
`,
		want: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  iniContainers:
  - image: nginx:2
`,
		summary: "1",
	}, {
		name:   "new tag drops the digest, in a pod template, and the quotes",
		config: configMapConfig("name: nginx", "newTag: 1.21.4"),
		items:  deployment,
		want: strings.NewReplacer(
			"image: nginx:1.20.2", "image: nginx:1.21.4",
			`image: "nginx@sha256:bbbb"`, "image: nginx:1.21.4",
			"image: nginx:1.0@sha256:aaaa\n      - name: bare", "image: nginx:1.21.4\n      - name: bare",
			"image: nginx\n", "image: nginx:1.21.4\n",
		).Replace(deployment),
		summary: "4",
	}, {
		name:   "digest replaces tag and digest, and wins over a new tag",
		config: configMapConfig("name: nginx", "newName: bitnami/nginx", "newTag: '2'", "digest: sha256:e1d6"),
		items:  deployment,
		want: strings.NewReplacer(
			"image: nginx:1.20.2", "image: bitnami/nginx@sha256:e1d6",
			`image: "nginx@sha256:bbbb"`, "image: bitnami/nginx@sha256:e1d6",
			"image: nginx:1.0@sha256:aaaa\n      - name: bare", "image: bitnami/nginx@sha256:e1d6\n      - name: bare",
			"image: nginx\n", "image: bitnami/nginx@sha256:e1d6\n",
		).Replace(deployment),
		summary: "4",
	}, {
		name:   "new name alone appends the old tag or digest without its separator",
		config: configMapConfig("name: nginx", "newName: mirror.example.com/nginx"),
		items:  deployment,
		want: strings.NewReplacer(
			"image: nginx:1.20.2", "image: mirror.example.com/nginx1.20.2",
			`image: "nginx@sha256:bbbb"`, "image: mirror.example.com/nginxsha256:bbbb",
			"image: nginx:1.0@sha256:aaaa\n      - name: bare", "image: mirror.example.com/nginx1.0\n      - name: bare",
			"image: nginx\n", "image: mirror.example.com/nginx\n",
		).Replace(deployment),
		summary: "4",
	}, {
		name:    "an image already set is not counted",
		config:  configMapConfig("name: postgres", "newTag: '14.1'"),
		items:   pod,
		summary: "0",
	}, {
		name:   "kinds are matched by kind alone",
		config: configMapConfig("name: nginx", "newTag: '2'"),
		items: `apiVersion: example.com/v1
kind: Deployment
metadata:
  name: custom
spec:
  template:
    spec:
      containers:
      - image: nginx:1
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: nested
spec:
  template:
    spec:
      containers:
      - image: nginx:1
`,
		want: `apiVersion: example.com/v1
kind: Deployment
metadata:
  name: custom
spec:
  template:
    spec:
      containers:
      - image: nginx:2
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: nested
spec:
  template:
    spec:
      containers:
      - image: nginx:2
`,
		summary: "2",
	}, {
		name:   "other kinds are left alone",
		config: configMapConfig("name: nginx", "newTag: '2'"),
		items: `apiVersion: batch/v1
kind: Job
metadata:
  name: job
spec:
  template:
    spec:
      containers:
      - name: c
        image: nginx:1
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: cron
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: c
            image: nginx:1
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: template
template:
  spec:
    containers:
    - name: c
      image: nginx:1
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crd
spec:
  containers:
  - image: nginx:1
`,
		summary: "0",
	}, {
		name:   "SetImage config with data",
		config: setImageConfig("image:", "  name: nginx", "  newTag: '2'", "data:", "  newTag: '3'"),
		items: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:1
`,
		want: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:3
`,
		summary: "1",
	}, {
		name:   "a ConfigMap of any group",
		config: "apiVersion: example.com/v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  name: nginx\n  newTag: '2'\n",
		items: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:1
`,
		want: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:2
`,
		summary: "1",
	}, {
		name:   "a name that is no expression, with no image to match",
		config: configMapConfig("name: 'ngin(x'", "newTag: '1'"),
		items: `apiVersion: v1
kind: ConfigMap
metadata:
  name: c
`,
		summary: "0",
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

func TestRunUpdatesAdditionalImageFields(t *testing.T) {
	const myKind = `apiVersion: dev.example.com/v1
kind: MyKind
metadata:
  name: the-resource
  annotations:
    note: 'quoted'
spec:
  manifest:
    images:
    - image: nginx:1.20.2 # pinned
    - image: postgres:14.1
    empty:
---
apiVersion: dev.example.com/v1
kind: OtherKind
metadata:
  name: other
spec:
  manifest:
    images:
    - image: nginx:1.20.2
`
	const additional = `additionalImageFields:
- group: dev.example.com
  version: v1
  kind: MyKind
  path: spec/manifest/images[]/image`
	// Every resource comes back from the catalog's JSON round trip:
	// comments and field order are kpt's to restore, but not the style of
	// the values.
	roundTripped := strings.NewReplacer("note: 'quoted'", "note: quoted", "empty:\n", "empty: null\n").Replace(myKind)
	tests := []struct {
		name    string
		config  string
		items   string
		want    string
		summary string
	}{{
		name:    "new name and tag",
		config:  setImageConfig("image:", "  name: nginx", "  newName: bitnami/nginx", "  newTag: 1.21.4", additional),
		items:   myKind,
		want:    strings.Replace(roundTripped, "image: nginx:1.20.2 # pinned", "image: bitnami/nginx:1.21.4 # pinned", 1),
		summary: "1",
	}, {
		name:    "new name alone keeps the tag, as kustomize does",
		config:  setImageConfig("image:", "  name: nginx", "  newName: bitnami/nginx", additional),
		items:   myKind,
		want:    strings.Replace(roundTripped, "image: nginx:1.20.2 # pinned", "image: bitnami/nginx:1.20.2 # pinned", 1),
		summary: "1",
	}, {
		name:    "new tag and digest are both kept, as kustomize does",
		config:  setImageConfig("image:", "  name: nginx", "  newTag: '2'", "  digest: sha256:e1d6", additional),
		items:   myKind,
		want:    strings.Replace(roundTripped, "image: nginx:1.20.2 # pinned", "image: nginx:2@sha256:e1d6 # pinned", 1),
		summary: "1",
	}, {
		name:    "an image already set is counted",
		config:  setImageConfig("image:", "  name: postgres", "  newTag: '14.1'", additional),
		items:   myKind,
		want:    roundTripped,
		summary: "1",
	}, {
		name:    "an empty list round-trips every resource all the same",
		config:  setImageConfig("image:", "  name: nginx", "  newTag: '2'", "additionalImageFields: []"),
		items:   myKind,
		want:    roundTripped,
		summary: "0",
	}, {
		name: "standard and additional fields are both counted",
		config: setImageConfig("image:", "  name: nginx", "  newTag: '2'",
			"additionalImageFields:", "- path: spec/containers[]/image"),
		items: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:1
  - image: nginx:2
`,
		want: `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: nginx:2
  - image: nginx:2
`,
		// 1 changed standard field, then 2 matches in the additional one.
		summary: "3",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, tt.items)
			require.True(t, ok, "results: %v", rl.Results)
			assert.Equal(t, strings.TrimSpace(tt.want), rl.Items.String())
			assert.Equal(t, fn.Results{summary(tt.summary)}, rl.Results)
		})
	}
}

func TestRunReportsResourceItCannotUpdate(t *testing.T) {
	broken := `apiVersion: dev.example.com/v1
kind: MyKind
metadata:
  name: broken
  namespace: ns
  annotations:
    internal.config.kubernetes.io/path: broken.yaml
    internal.config.kubernetes.io/index: '1'
spec:
  image:
    name: 'nginx'
`
	config := setImageConfig("image:", "  name: nginx", "  newTag: '2'", "additionalImageFields:", "- path: spec/image")
	rl, ok := run(t, config, pod+"---\n"+broken)
	assert.True(t, ok, "the catalog's function succeeds")
	require.Len(t, rl.Results, 2)
	got := rl.Results[0]
	assert.Equal(t, fn.Error, got.Severity)
	assert.Contains(t, got.Message, "wrong node kind: expected ScalarNode but got MappingNode")
	assert.Equal(t, &fn.ResourceRef{APIVersion: "dev.example.com/v1", Kind: "MyKind", Name: "broken", Namespace: "ns"}, got.ResourceRef)
	assert.Equal(t, &fn.File{Path: "broken.yaml", Index: 1}, got.File)
	assert.Equal(t, summary("1"), rl.Results[1], "the other resource is still updated")
	assert.Contains(t, rl.Items[0].String(), "image: nginx:2 # the web server")
	assert.Equal(t, strings.TrimSpace(broken), strings.TrimSpace(rl.Items[1].String()), "left as it was")
}

func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   fn.Results
	}{
		{"no config", "", append(fn.Results{{Message: "`FunctionConfig` is not given", Severity: fn.Info}},
			terminated("must specify `name`")...)},
		{"no name", configMapConfig("newTag: '1'"), terminated("must specify `name`")},
		{"nothing to set", configMapConfig("name: nginx"), terminated("must specify one of `newName`, `newTag`, or `digest`")},
		{"unknown ConfigMap key", configMapConfig("name: nginx", "newTag: '1'", "tag: '2'"), terminated("ConfigMap has wrong field name tag")},
		{"unknown SetImage data key", setImageConfig("image:", "  name: nginx", "data:", "  tag: '2'"), terminated("ConfigMap has wrong field name tag")},
		{"SetImage without image", setImageConfig(), terminated("must specify `name`")},
		{"ConfigMap data that is not all strings", configMapConfig("name: {a: b}"),
			fn.Results{{Message: "SubObject has unmatched field type: `data", Severity: fn.Error}}},
		{"SetImage field of the wrong type", setImageConfig("image:", "  name: 5"),
			fn.Results{{Message: "SubObject has unmatched field type: `", Severity: fn.Error}}},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Other\nmetadata:\n  name: c\n", fn.Results{{
			Message:     "unknown FunctionConfig `Other`, expect SetImage",
			Severity:    fn.Error,
			ResourceRef: &fn.ResourceRef{APIVersion: "example.com/v1", Kind: "Other", Name: "c"},
			File:        &fn.File{Index: -1},
		}, {
			Message:  "function is terminated by Resource(apiVersion=example.com/v1, kind=Other, namespace=, name=c): unknown FunctionConfig `Other`, expect SetImage",
			Severity: fn.Error,
		}}},
		{"name that is no expression", configMapConfig("name: 'ngin(x'", "newTag: '1'"), fn.Results{{
			Message:  "invalid image `name` \"ngin(x\": error parsing regexp: missing closing ): `^ngin(x(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9_.{}-]*)?$`",
			Severity: fn.Error,
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, pod)
			assert.False(t, ok)
			assert.Equal(t, tt.want, rl.Results)
			assert.Equal(t, strings.TrimSpace(pod), rl.Items.String(), "items must be unchanged")
		})
	}
}

func TestRunFailsOnImageOfWrongType(t *testing.T) {
	const items = `apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  containers:
  - image: 5
`
	rl, ok := run(t, configMapConfig("name: nginx", "newTag: '2'"), items)
	assert.False(t, ok)
	assert.Equal(t, fn.Results{{Message: "SubObject has unmatched field type: `image", Severity: fn.Error}}, rl.Results)
}
