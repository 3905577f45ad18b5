package upsertresource_test

import (
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/upsert-resource/upsertresource"
)

// pkg is a package as kpt gives it to functions: each resource with the
// annotations that place it in its file.
const pkg = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/path: app/service.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: app/service.yaml
    internal.config.kubernetes.io/index: '0'
spec:
  selector:
    app: web
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/path: app/deployment.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: app/deployment.yaml
    internal.config.kubernetes.io/index: '0'
spec:
  replicas: 1
`

// deployment is pkg's Deployment.
const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/path: app/deployment.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: app/deployment.yaml
    internal.config.kubernetes.io/index: '0'
spec:
  replicas: 1
`

// service is pkg's Service.
const service = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/path: app/service.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: app/service.yaml
    internal.config.kubernetes.io/index: '0'
spec:
  selector:
    app: web
`

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		items  string
		want   string
	}{
		{
			name: "replaces the resource with its group, kind, namespace and name, in its place",
			config: `apiVersion: apps/v1beta2
kind: Deployment
metadata:
  name: web
  namespace: app
  annotations:
    owner: team-a
spec:
  replicas: 3
`,
			items: pkg,
			want: service + `---
apiVersion: apps/v1beta2
kind: Deployment
metadata:
  name: web
  namespace: app
  annotations:
    owner: team-a
    internal.config.kubernetes.io/path: 'app/deployment.yaml'
    config.kubernetes.io/path: 'app/deployment.yaml'
    internal.config.kubernetes.io/index: '0'
    config.kubernetes.io/index: '0'
spec:
  replicas: 3
`,
		},
		{
			name: "adds a resource of another namespace, to no file",
			config: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: other
spec:
  replicas: 3
`,
			items: pkg,
			want: pkg + `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: other
spec:
  replicas: 3
`,
		},
		{
			name: "adds a resource of another group",
			config: `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: web
  namespace: app
`,
			items: pkg,
			want: pkg + `---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: web
  namespace: app
`,
		},
		{
			name: "replaces every resource with the identity",
			config: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: "2"
`,
			items: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: a.yaml
data:
  a: "1"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: b.yaml
data:
  a: "1"
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: 'a.yaml'
data:
  a: "2"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: 'b.yaml'
data:
  a: "2"
`,
		},
		{
			name: "the target path narrows the replacement to its file",
			config: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/target-path: b.yaml
data:
  a: "2"
`,
			items: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: a.yaml
data:
  a: "1"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    internal.config.kubernetes.io/path: b.yaml
data:
  a: "1"
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    config.kubernetes.io/path: a.yaml
data:
  a: "1"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations:
    internal.config.kubernetes.io/path: 'b.yaml'
data:
  a: "2"
`,
		},
		{
			name: "a resource that matches nothing in its target path is added to that file",
			config: `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/target-path: sub/service.yaml
    owner: team-a
spec:
  selector:
    app: other
`,
			items: pkg,
			want: pkg + `---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: app
  annotations:
    owner: team-a
    internal.config.kubernetes.io/path: 'sub/service.yaml'
    config.kubernetes.io/path: 'sub/service.yaml'
spec:
  selector:
    app: other
`,
		},
		{
			name: "kpt's annotations on the functionConfig are not carried over",
			config: `apiVersion: v1
kind: Service
metadata:
  name: new
  namespace: app
  annotations:
    config.kubernetes.io/path: fn-config.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: fn-config.yaml
    internal.config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/id: '7'
    config.k8s.io/id: '7'
    config.kubernetes.io/function: |
      container:
        image: upsert-resource
`,
			items: pkg,
			want: pkg + `---
apiVersion: v1
kind: Service
metadata:
  name: new
  namespace: app
`,
		},
		{
			name: "a List: each item upserted in turn",
			config: `apiVersion: v1
kind: List
metadata:
  name: resources
items:
- apiVersion: v1
  kind: Service
  metadata:
    name: web
    namespace: app
  spec:
    selector:
      app: new
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web2
    namespace: app
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web2
    namespace: app
  spec:
    replicas: 2
`,
			items: pkg,
			want: `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: app
  annotations:
    internal.config.kubernetes.io/path: 'app/service.yaml'
    config.kubernetes.io/path: 'app/service.yaml'
    internal.config.kubernetes.io/index: '0'
    config.kubernetes.io/index: '0'
spec:
  selector:
    app: new
---
` + deployment + `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web2
  namespace: app
spec:
  replicas: 2
`,
		},
		{
			name:   "a List without items changes nothing",
			config: "apiVersion: v1\nkind: List\nmetadata:\n  name: nothing\n",
			items:  pkg,
			want:   pkg,
		},
		{
			name: "kpt v0 function configs are never replaced",
			config: `apiVersion: v1
kind: ConfigMap
metadata:
  name: fn
data:
  a: "2"
`,
			items: `apiVersion: v1
kind: ConfigMap
metadata:
  name: fn
  annotations:
    config.k8s.io/function: |
      container:
        image: x
data:
  a: "1"
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: fn
  annotations:
    config.k8s.io/function: |
      container:
        image: x
data:
  a: "1"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: fn
data:
  a: "2"
`,
		},
		{
			name: "an empty package gets the resource",
			config: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rl := resourceList(t, tc.config, tc.items)
			ok, err := upsertresource.Run(rl)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Empty(t, rl.Results)
			assert.Equal(t, tc.want, itemsYAML(rl))
		})
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  string
		wantErr string
	}{
		{
			name:    "no functionConfig",
			wantErr: "upsert-resource: no functionConfig: want the resource to upsert, or a List of them",
		},
		{
			name:    "a functionConfig without name",
			config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: app\n",
			wantErr: "upsert-resource: functionConfig: not a resource: no metadata.name",
		},
		{
			name:    "a functionConfig without apiVersion",
			config:  "kind: ConfigMap\nmetadata:\n  name: x\n",
			wantErr: "upsert-resource: functionConfig: not a resource: no apiVersion",
		},
		{
			name:    "a List whose items are not a list",
			config:  "apiVersion: v1\nkind: List\nmetadata:\n  name: x\nitems:\n  a: b\n",
			wantErr: "upsert-resource: functionConfig List items: ",
		},
		{
			name:    "a List item that is not a map",
			config:  "apiVersion: v1\nkind: List\nmetadata:\n  name: x\nitems:\n- a\n",
			wantErr: "upsert-resource: functionConfig List items[0]: not a resource: not a map",
		},
		{
			name:    "a List item without kind",
			config:  "apiVersion: v1\nkind: List\nmetadata:\n  name: x\nitems:\n- apiVersion: v1\n  metadata:\n    name: y\n",
			wantErr: "upsert-resource: functionConfig List items[0]: not a resource: no kind",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rl := resourceList(t, tc.config, pkg)
			ok, err := upsertresource.Run(rl)
			require.Error(t, err)
			assert.False(t, ok)
			assert.Contains(t, err.Error(), tc.wantErr)
			require.Len(t, rl.Results, 1)
			assert.Equal(t, fn.Error, rl.Results[0].Severity)
			assert.Equal(t, err.Error(), rl.Results[0].Message)
			assert.Equal(t, pkg, itemsYAML(rl), "items are left as they were")
		})
	}
}

// resourceList is a ResourceList of the items (YAML documents) and the
// functionConfig (none when empty).
func resourceList(t *testing.T, config, items string) *fn.ResourceList {
	t.Helper()
	rl := &fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject()}
	if config != "" {
		o, err := fn.ParseKubeObject([]byte(config))
		require.NoError(t, err)
		rl.FunctionConfig = o
	}
	if items != "" {
		objs, err := fn.ParseKubeObjects([]byte(items))
		require.NoError(t, err)
		rl.Items = objs
	}
	return rl
}

// itemsYAML is the items as YAML documents.
func itemsYAML(rl *fn.ResourceList) string {
	docs := make([]string, len(rl.Items))
	for i, o := range rl.Items {
		docs[i] = o.String()
	}
	return strings.Join(docs, "---\n")
}
