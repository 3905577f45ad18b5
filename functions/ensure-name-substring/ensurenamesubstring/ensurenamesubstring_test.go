package ensurenamesubstring_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/ensure-name-substring/ensurenamesubstring"
	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/tests/harness"
)

const (
	prependConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: function-input
data:
  prepend: dev-
`
	appendConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: function-input
data:
  append: -dev
`
)

// podAndItsConfig is a ConfigMap and a Secret, and a Pod that refers to
// both by name.
const podAndItsConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: app
data:
  key: value
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: app
---
apiVersion: v1
kind: Pod
metadata:
  name: server
  namespace: app
spec:
  containers:
  - name: server
    image: busybox
    env:
    - name: KEY
      valueFrom:
        configMapKeyRef:
          name: settings
          key: key
    envFrom:
    - secretRef:
        name: creds
  volumes:
  - name: config
    configMap:
      name: settings
`

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		items  string
		want   string
	}{
		{
			name:   "prepend: names and the references to them",
			config: prependConfig,
			items:  podAndItsConfig,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: dev-settings
  namespace: app
data:
  key: value
---
apiVersion: v1
kind: Secret
metadata:
  name: dev-creds
  namespace: app
---
apiVersion: v1
kind: Pod
metadata:
  name: dev-server
  namespace: app
spec:
  containers:
  - name: server
    image: busybox
    env:
    - name: KEY
      valueFrom:
        configMapKeyRef:
          name: dev-settings
          key: key
    envFrom:
    - secretRef:
        name: dev-creds
  volumes:
  - name: config
    configMap:
      name: dev-settings
`,
		},
		{
			name:   "append",
			config: appendConfig,
			items: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: server
spec:
  template:
    spec:
      volumes:
      - name: config
        configMap:
          name: settings
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings-dev
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: server-dev
spec:
  template:
    spec:
      volumes:
      - name: config
        configMap:
          name: settings-dev
`,
		},
		{
			name:   "names that contain the substring anywhere are kept",
			config: prependConfig,
			items: `apiVersion: v1
kind: Service
metadata:
  name: dev-server
---
apiVersion: v1
kind: Service
metadata:
  name: my-dev-server
`,
			want: `apiVersion: v1
kind: Service
metadata:
  name: dev-server
---
apiVersion: v1
kind: Service
metadata:
  name: my-dev-server
`,
		},
		{
			name:   "CRDs, APIServices, Namespaces and Kptfiles keep their names; local config does not",
			config: prependConfig,
			items: `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.example.com
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
---
apiVersion: kpt.dev/v1
kind: Kptfile
metadata:
  name: pkg
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: local
  annotations:
    config.kubernetes.io/local-config: "true"
`,
			want: `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.example.com
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
---
apiVersion: kpt.dev/v1
kind: Kptfile
metadata:
  name: pkg
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dev-local
  annotations:
    config.kubernetes.io/local-config: "true"
`,
		},
		{
			name: "EnsureNameSubstring: additionalNameFields, prepend by default",
			config: `apiVersion: fn.kpt.dev/v1alpha1
kind: EnsureNameSubstring
metadata:
  name: config
substring: prod-
additionalNameFields:
- group: dev.example.com
  version: v1
  kind: MyResource
  path: spec/name
`,
			items: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: cr
spec:
  name: foo
---
apiVersion: other.example.com/v1
kind: MyResource
metadata:
  name: other
spec:
  name: foo
`,
			want: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: prod-cr
spec:
  name: prod-foo
---
apiVersion: other.example.com/v1
kind: MyResource
metadata:
  name: prod-other
spec:
  name: foo
`,
		},
		{
			name: "EnsureNameSubstring: deprecated fieldSpecs, append, fields in lists, a field with the substring kept",
			config: `apiVersion: fn.kpt.dev/v1alpha1
kind: EnsureNameSubstring
metadata:
  name: config
substring: -prod
editMode: append
fieldSpecs:
- kind: MyResource
  path: spec/targets/name
`,
			items: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: cr
spec:
  targets:
  - name: a
  - name: b-prod
`,
			want: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: cr-prod
spec:
  targets:
  - name: a-prod
  - name: b-prod
`,
		},
		{
			name: "EnsureNameSubstring: create makes a missing field",
			config: `apiVersion: fn.kpt.dev/v1alpha1
kind: EnsureNameSubstring
metadata:
  name: config
substring: prod-
additionalNameFields:
- kind: MyResource
  path: spec/name
  create: true
`,
			items: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: cr
spec: {}
`,
			want: `apiVersion: dev.example.com/v1
kind: MyResource
metadata:
  name: prod-cr
spec: {name: prod-}
`,
		},
		{
			name:   "depends-on references to renamed resources of the package",
			config: prependConfig,
			items: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: app
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dev-ready
  namespace: app
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
  annotations:
    config.kubernetes.io/depends-on: apps/namespaces/app/StatefulSet/db, rbac.authorization.k8s.io/ClusterRole/reader,/namespaces/app/ConfigMap/dev-ready,apps/namespaces/app/StatefulSet/elsewhere
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations:
    config.kubernetes.io/depends-on: bad/reference
`,
			want: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: dev-db
  namespace: app
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: dev-reader
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dev-ready
  namespace: app
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: dev-web
  namespace: app
  annotations:
    config.kubernetes.io/depends-on: apps/namespaces/app/StatefulSet/dev-db, rbac.authorization.k8s.io/ClusterRole/dev-reader,/namespaces/app/ConfigMap/dev-ready,apps/namespaces/app/StatefulSet/elsewhere
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations:
    config.kubernetes.io/depends-on: bad/reference
`,
		},
		{
			name:   "kustomize name references: HPA target, role binding",
			config: prependConfig,
			items: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
  namespace: app
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: reader
  namespace: app
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: bot
  namespace: app
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: bot-reads
  namespace: app
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: reader
subjects:
- kind: ServiceAccount
  name: bot
  namespace: app
`,
			want: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: dev-web
  namespace: app
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: dev-web
  namespace: app
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: dev-web
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: dev-reader
  namespace: app
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: dev-bot
  namespace: app
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: dev-bot-reads
  namespace: app
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: dev-reader
subjects:
- kind: ServiceAccount
  name: dev-bot
  namespace: app
`,
		},
		{
			name:   "kpt's file annotations are cleared, the others kept in place",
			config: prependConfig,
			items: `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    team: a
    config.kubernetes.io/path: resources.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/path: resources.yaml
    internal.config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/seqindent: wide
  name: settings
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations:
    config.kubernetes.io/path: resources.yaml
    config.kubernetes.io/index: '1'
`,
			want: `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    team: a
  name: dev-settings
---
apiVersion: v1
kind: Namespace
metadata:
  name: app
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rl := resourceList(t, tc.config, tc.items)
			ok, err := ensurenamesubstring.RunUnstable(rl)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Empty(t, rl.Results)
			assert.Equal(t, tc.want, itemsYAML(rl))

			// Ensuring is idempotent: a second run changes nothing.
			again := resourceList(t, tc.config, itemsYAML(rl))
			_, err = ensurenamesubstring.RunUnstable(again)
			require.NoError(t, err)
			assert.Equal(t, tc.want, itemsYAML(again), "second run")
		})
	}
}

func TestRunErrors(t *testing.T) {
	const items = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
`
	for _, tc := range []struct {
		name    string
		config  string
		items   string
		wantErr string
	}{
		{
			name:    "no functionConfig",
			wantErr: "no functionConfig",
		},
		{
			name:    "another kind",
			config:  "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
			wantErr: "functionConfig is apps/v1 Deployment: want v1 ConfigMap or fn.kpt.dev/v1alpha1 EnsureNameSubstring",
		},
		{
			name:    "ConfigMap with two entries",
			config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  prepend: a-\n  append: -b\n",
			wantErr: "ConfigMap data must have exactly one entry",
		},
		{
			name:    "ConfigMap without data",
			config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
			wantErr: "ConfigMap data must have exactly one entry",
		},
		{
			name:    "ConfigMap with another key",
			config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  prefix: a-\n",
			wantErr: `ConfigMap data key "prefix": want "prepend" or "append"`,
		},
		{
			name:    "ConfigMap with an empty substring",
			config:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  prepend: \"\"\n",
			wantErr: "substring must not be empty",
		},
		{
			name:    "EnsureNameSubstring without substring",
			config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: x\n",
			wantErr: "substring must not be empty",
		},
		{
			name:    "EnsureNameSubstring with another editMode",
			config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: x\nsubstring: a-\neditMode: replace\n",
			wantErr: `editMode "replace": want "prepend" or "append"`,
		},
		{
			name:    "EnsureNameSubstring with both fieldSpecs and additionalNameFields",
			config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: x\nsubstring: a-\nfieldSpecs:\n- path: spec/a\nadditionalNameFields:\n- path: spec/b\n",
			wantErr: "fieldSpecs is the deprecated name of additionalNameFields",
		},
		{
			name:    "EnsureNameSubstring with a field without path",
			config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: x\nsubstring: a-\nadditionalNameFields:\n- kind: ConfigMap\n",
			wantErr: "additionalNameFields[0]: path is required",
		},
		{
			name:    "a name field that is not a string",
			config:  "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: x\nsubstring: a-\nadditionalNameFields:\n- kind: ConfigMap\n  path: data\n",
			items:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  k: v\n",
			wantErr: "ensure-name-substring: ConfigMap settings: considering field 'data' of object",
		},
		{
			// The filter that fails takes the referrer's node: the message
			// names it from before.
			name:    "a reference that could be to either of two",
			config:  prependConfig,
			items:   "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n  namespace: a\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n  namespace: b\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: crb\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}\nsubjects:\n- {kind: ServiceAccount, name: sa}\n",
			wantErr: "ensure-name-substring: ClusterRoleBinding dev-crb: updating references to ServiceAccount names",
		},
		{
			name:    "two resources with one identity",
			config:  prependConfig,
			items:   items + "---\n" + items,
			wantErr: "reading the resources",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.items
			if in == "" {
				in = items
			}
			rl := resourceList(t, tc.config, in)
			ok, err := ensurenamesubstring.RunUnstable(rl)
			require.Error(t, err)
			assert.False(t, ok)
			assert.Contains(t, err.Error(), tc.wantErr)
			require.Len(t, rl.Results, 1)
			assert.Equal(t, fn.Error, rl.Results[0].Severity)
			assert.Equal(t, err.Error(), rl.Results[0].Message)
			assert.Equal(t, in, itemsYAML(rl), "items are left as they were")
		})
	}
}

// TestRunThroughFnRun checks the function as its binary runs it: a
// ResourceList in, a ResourceList out.
func TestRunThroughFnRun(t *testing.T) {
	in := `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
    annotations:
      config.kubernetes.io/path: settings.yaml
      internal.config.kubernetes.io/path: settings.yaml
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    prepend: dev-
`
	out, err := fn.Run(fn.ResourceListProcessorFunc(ensurenamesubstring.RunUnstable), []byte(in))
	require.NoError(t, err)
	assert.Equal(t, `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: dev-settings
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    prepend: dev-
`, string(out))
}

// TestNameReferenceSpecsMatchKustomize checks the name reference specs
// against those of the kustomize module in go.mod, when its source is at
// hand.
func TestNameReferenceSpecsMatchKustomize(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(kustomizeAPISource(t), "internal", "konfig", "builtinpluginconsts", "namereference.go"))
	require.NoError(t, err, "kustomize's namereference.go")
	_, specs, found := strings.Cut(string(src), "\nnameReference:")
	require.True(t, found, "no nameReference in kustomize's namereference.go")
	specs, _, found = strings.Cut(specs, "`")
	require.True(t, found, "no end to nameReference in kustomize's namereference.go")
	assert.Equal(t, "nameReference:"+specs, strings.TrimPrefix(ensurenamesubstring.NameReferenceSpecs, "\n"))
}

// kustomizeAPISource is the directory of the sigs.k8s.io/kustomize/api
// module this code is built with: under Bazel, in the module cache and at
// the version @gomod names (its go_env.sh and modules.txt); under go test,
// where the go command finds it.
func kustomizeAPISource(t *testing.T) string {
	t.Helper()
	const module = "sigs.k8s.io/kustomize/api"
	envFile := os.Getenv("FNRUNNER_GOMOD_ENV")
	if envFile == "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			err = errors.New("go list -m printed no directory")
		}
		if err != nil {
			harness.Need(t, "the name reference specs against kustomize's", fmt.Errorf("the kustomize module's source is not at hand: %w", err))
		}
		return strings.TrimSpace(string(out))
	}
	env, err := os.ReadFile(harness.Runfile(t, envFile))
	require.NoError(t, err)
	var cache string
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "GOMODCACHE="); ok {
			cache = strings.Trim(v, "'")
		}
	}
	require.NotEmpty(t, cache, "GOMODCACHE in %s", envFile)
	mods, err := os.ReadFile(harness.Runfile(t, os.Getenv("FNRUNNER_GOMOD_MODULES")))
	require.NoError(t, err)
	for _, line := range strings.Split(string(mods), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			return filepath.Join(cache, module+"@"+f[1])
		}
	}
	t.Fatalf("%s is not in @gomod's modules", module)
	return ""
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
	objs, err := fn.ParseKubeObjects([]byte(items))
	require.NoError(t, err)
	rl.Items = objs
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

// TestMatchesV011 runs Run on each input of testdata/v0.1.1 and compares
// its answer with the v0.1.1 release's (see the README there): the same
// items, in any order, or the same log.
func TestMatchesV011(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "v0.1.1", "*.in.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			require.NoError(t, err)
			out, err := fn.Run(fn.ResourceListProcessorFunc(ensurenamesubstring.Run), input)
			if want, rerr := os.ReadFile(strings.TrimSuffix(in, ".in.yaml") + ".error"); rerr == nil {
				require.Error(t, err)
				assert.Equal(t, string(want), exitlog.Of(err), "the binary's log")
				return
			}
			require.NoError(t, err)
			want, err := os.ReadFile(strings.TrimSuffix(in, ".in.yaml") + ".out.yaml")
			require.NoError(t, err)
			assert.Equal(t, fntest.Items(t, want), fntest.Items(t, out))
		})
	}
}
