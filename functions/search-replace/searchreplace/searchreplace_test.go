package searchreplace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/search-replace/searchreplace"
)

// config is a ConfigMap functionConfig with the given data lines.
func config(data ...string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  " +
		strings.Join(data, "\n  ") + "\n"
}

// run runs search-replace on items (YAML documents) with the
// functionConfig cfg (YAML, empty for none).
func run(t *testing.T, cfg, items string) (*fn.ResourceList, bool) {
	t.Helper()
	rl, ok, err := runErr(t, cfg, items)
	if ok {
		require.NoError(t, err)
	} else {
		require.Error(t, err)
	}
	return rl, ok
}

// runErr is run, with Run's error.
func runErr(t *testing.T, cfg, items string) (*fn.ResourceList, bool, error) {
	t.Helper()
	rl := &fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject()}
	if cfg != "" {
		fc, err := fn.ParseKubeObject([]byte(cfg))
		require.NoError(t, err)
		rl.FunctionConfig = fc
	}
	objs, err := fn.ParseKubeObjects([]byte(items))
	require.NoError(t, err)
	rl.Items = objs
	ok, err := searchreplace.Run(rl)
	return rl, ok, err
}

// matched and mutated are the results for one field.
func matched(value, field, file string) *fn.Result {
	return result(fmt.Sprintf("Matched field value %q", value), field, file)
}

func mutated(value, field, file string) *fn.Result {
	return result(fmt.Sprintf("Mutated field value to %q", value), field, file)
}

func result(message, field, file string) *fn.Result {
	r := &fn.Result{Message: message, Field: &fn.Field{Path: field}}
	if file != "" {
		r.File = &fn.File{Path: file}
	}
	return r
}

var noMatches = &fn.Result{Message: "no matches"}

// The resources carry kpt's file annotations under both names, as kpt
// passes them, so that a search leaves them as they are.
const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  annotations:
    config.kubernetes.io/path: app/deployment.yaml
    internal.config.kubernetes.io/path: app/deployment.yaml
    config.kubernetes.io/index: '0'
    internal.config.kubernetes.io/index: '0'
spec:
  replicas: 3
  foo: 3
  list:
  - a
  - b
  template:
    spec:
      containers:
      - name: web
        image: my-nginx-app:1
        ports:
        - containerPort: 80
      - name: side
        image: busybox
        ports:
        - containerPort: 81
`

const service = `apiVersion: v1
kind: Service
metadata:
  name: nginx-service
  annotations:
    config.kubernetes.io/path: setters.yaml
    internal.config.kubernetes.io/path: setters.yaml
spec:
  port: 80
`

func TestRunSearches(t *testing.T) {
	items := deployment + "---\n" + service
	tests := []struct {
		name   string
		config string
		want   fn.Results
	}{
		{"by value", config("by-value: '3'"), fn.Results{
			matched("3", "spec.replicas", "app/deployment.yaml"),
			matched("3", "spec.foo", "app/deployment.yaml"),
		}},
		{"by value regex matches anywhere in the value", config("by-value-regex: nginx-(.*)"), fn.Results{
			matched("nginx-deployment", "metadata.name", "app/deployment.yaml"),
			matched("my-nginx-app:1", "spec.template.spec.containers[0].image", "app/deployment.yaml"),
			matched("nginx-service", "metadata.name", "setters.yaml"),
		}},
		{"by value regex with its own anchors", config("by-value-regex: '^nginx-.*$'"), fn.Results{
			matched("nginx-deployment", "metadata.name", "app/deployment.yaml"),
			matched("nginx-service", "metadata.name", "setters.yaml"),
		}},
		{"kpt's annotations are searched", config("by-value: setters.yaml"), fn.Results{
			matched("setters.yaml", "metadata.annotations.config.kubernetes.io/path", "setters.yaml"),
			matched("setters.yaml", "metadata.annotations.internal.config.kubernetes.io/path", "setters.yaml"),
		}},
		{"kpt's annotations by path", config("by-path: metadata.annotations.internal.config.kubernetes.io/index"), fn.Results{
			matched("'0'", "metadata.annotations.internal.config.kubernetes.io/index", "app/deployment.yaml"),
		}},
		{"by path", config("by-path: spec.replicas"), fn.Results{
			matched("3", "spec.replicas", "app/deployment.yaml"),
		}},
		{"by path and value", config("by-path: spec.replicas", "by-value: '3'"), fn.Results{
			matched("3", "spec.replicas", "app/deployment.yaml"),
		}},
		{"by path with ** and value", config("by-path: 'spec.**.containerPort'", "by-value: '80'"), fn.Results{
			matched("80", "spec.template.spec.containers[0].ports[0].containerPort", "app/deployment.yaml"),
		}},
		{"** matches no element", config("by-path: '**.spec.port'"), fn.Results{
			matched("80", "spec.port", "setters.yaml"),
		}},
		{"* matches one element", config("by-path: '*.port'"), fn.Results{
			matched("80", "spec.port", "setters.yaml"),
		}},
		{"list index", config("by-path: spec.list[1]"), fn.Results{
			matched("b", "spec.list[1]", "app/deployment.yaml"),
		}},
		{"any list index", config("by-path: 'spec.list[*]'"), fn.Results{
			matched("a", "spec.list[0]", "app/deployment.yaml"),
			matched("b", "spec.list[1]", "app/deployment.yaml"),
		}},
		{"any list with index", config("by-path: 'spec.template.spec.*[1].name'"), fn.Results{
			matched("side", "spec.template.spec.containers[1].name", "app/deployment.yaml"),
		}},
		{"index out of range", config("by-path: spec.list[2]"), fn.Results{noMatches}},
		{"by file path", config("by-file-path: '**/setters.yaml'", "by-value: '80'"), fn.Results{
			matched("80", "spec.port", "setters.yaml"),
		}},
		{"by file path in a directory", config("by-file-path: 'app/*.yaml'", "by-path: metadata.name"), fn.Results{
			matched("nginx-deployment", "metadata.name", "app/deployment.yaml"),
		}},
		{"by file path alone matches no field", config("by-file-path: '**'"), fn.Results{noMatches}},
		{"no matchers", config("put-value: foo"), fn.Results{noMatches}},
		{"a value that is not a string reads as empty", config("by-value: {a: b}"), fn.Results{noMatches}},
		{"no config", "", fn.Results{noMatches}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, items)
			require.True(t, ok, "results: %v", rl.Results)
			assert.Equal(t, tt.want, rl.Results)
			assert.Equal(t, strings.TrimSpace(items), rl.Items.String(), "a search changes nothing")
		})
	}
}

func TestRunReadsTheLegacyPathOnly(t *testing.T) {
	// As v0.2.0's binary answers (kyaml v0.10.21's GetFileAnnotations):
	// the path is config.kubernetes.io/path; a resource with only the
	// internal annotations is searched but not reported; none is added.
	const items = `apiVersion: v1
kind: Service
metadata:
  name: svc
  annotations:
    config.kubernetes.io/path: svc.yaml
    config.kubernetes.io/index: '5'
spec:
  port: 5
---
apiVersion: v1
kind: Service
metadata:
  name: new
  annotations:
    internal.config.kubernetes.io/path: new.yaml
    internal.config.kubernetes.io/index: '5'
spec:
  port: 5
`
	rl, ok := run(t, config("by-value: '5'"), items)
	require.True(t, ok, "results: %v", rl.Results)
	assert.Equal(t, fn.Results{
		matched("'5'", "metadata.annotations.config.kubernetes.io/index", "svc.yaml"),
		matched("5", "spec.port", "svc.yaml"),
	}, rl.Results)
	assert.Equal(t, strings.TrimSpace(items), rl.Items.String())
}

func TestRunReplaces(t *testing.T) {
	const app = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: foo1-dev-bar1-us-east-1-baz1
  namespace: "foo2-dev-bar2-us-east-1-baz2"
  annotations:
    config.kubernetes.io/path: app.yaml
    internal.config.kubernetes.io/path: app.yaml
spec:
  replicas: 3 # scale
  environments:
  - dev
  - stage
  tags: [a, b]
  # the regions
  regions:
  - us
  containers:
  - name: web
    image: nginx
`
	tests := []struct {
		name   string
		config string
		want   string
		result fn.Results
	}{{
		name:   "put value by value",
		config: config("by-value: '3'", "put-value: '4'"),
		want:   strings.Replace(app, "replicas: 3 #", "replicas: 4 #", 1),
		result: fn.Results{mutated("4 # scale", "spec.replicas", "app.yaml")},
	}, {
		name:   "put value of another type",
		config: config("by-path: spec.replicas", "by-value: '3'", "put-value: four"),
		want:   strings.Replace(app, "replicas: 3 #", "replicas: four #", 1),
		result: fn.Results{mutated("four # scale", "spec.replicas", "app.yaml")},
	}, {
		name:   "put value with capture groups keeps the quoting",
		config: config(`by-value-regex: '(\w+)-dev-(\w+)-us-east-1-(\w+)'`, "put-value: '${1}-prod-${2}-us-central-1-${3}'"),
		want: strings.NewReplacer(
			"foo1-dev-bar1-us-east-1-baz1", "foo1-prod-bar1-us-central-1-baz1",
			"foo2-dev-bar2-us-east-1-baz2", "foo2-prod-bar2-us-central-1-baz2",
		).Replace(app),
		result: fn.Results{
			mutated("foo1-prod-bar1-us-central-1-baz1", "metadata.name", "app.yaml"),
			mutated(`"foo2-prod-bar2-us-central-1-baz2"`, "metadata.namespace", "app.yaml"),
		},
	}, {
		name:   "put value by value regex replaces the whole value",
		config: config("by-value-regex: dev", "put-value: prod"),
		want: strings.NewReplacer(
			"name: foo1-dev-bar1-us-east-1-baz1", "name: prod",
			`"foo2-dev-bar2-us-east-1-baz2"`, `"prod"`,
			"  - dev\n", "  - prod\n",
		).Replace(app),
		result: fn.Results{
			mutated("prod", "metadata.name", "app.yaml"),
			mutated(`"prod"`, "metadata.namespace", "app.yaml"),
			mutated("prod", "spec.environments[0]", "app.yaml"),
		},
	}, {
		name:   "a capture group outside the match resolves to nothing",
		config: config("by-value-regex: 'st(x)?age'", "put-value: 'new${1}'"),
		want:   strings.Replace(app, "  - stage\n", "  - new\n", 1),
		result: fn.Results{mutated("new", "spec.environments[1]", "app.yaml")},
	}, {
		name:   "put comment with capture groups",
		config: config("by-path: metadata.name", "by-value-regex: '(.*)-dev-(.*)'", "put-comment: 'kpt-set: ${1}-${env}-${2}'"),
		want:   strings.Replace(app, "name: foo1-dev-bar1-us-east-1-baz1", "name: foo1-dev-bar1-us-east-1-baz1 # kpt-set: foo1-${env}-bar1-us-east-1-baz1", 1),
		result: fn.Results{mutated("foo1-dev-bar1-us-east-1-baz1 # kpt-set: foo1-${env}-bar1-us-east-1-baz1", "metadata.name", "app.yaml")},
	}, {
		name:   "put value and comment",
		config: config("by-value: dev", "put-value: prod", "put-comment: 'kpt-set: ${env}'"),
		want:   strings.Replace(app, "  - dev\n", "  - prod # kpt-set: ${env}\n", 1),
		result: fn.Results{mutated("prod # kpt-set: ${env}", "spec.environments[0]", "app.yaml")},
	}, {
		name:   "put value at a path creates the field",
		config: config("by-path: metadata.labels.tier", "put-value: web"),
		want:   strings.Replace(app, "spec:\n", "  labels:\n    tier: web\nspec:\n", 1),
		result: fn.Results{mutated("web", "metadata.labels.tier", "app.yaml")},
	}, {
		name:   "put value at a path ignores put-comment",
		config: config("by-path: spec.replicas", "put-value: '5'", "put-comment: 'kpt-set: ${replicas}'"),
		want:   strings.Replace(app, "replicas: 3 # scale", "replicas: 5 # scale", 1),
		result: fn.Results{mutated("5", "spec.replicas", "app.yaml")},
	}, {
		name:   "put value at a path keeps the style and reports the value as it is",
		config: config("by-path: metadata.namespace", "put-value: prod"),
		want:   strings.Replace(app, `"foo2-dev-bar2-us-east-1-baz2"`, `"prod"`, 1),
		result: fn.Results{mutated("prod", "metadata.namespace", "app.yaml")},
	}, {
		name:   "put value at a path with a list index",
		config: config("by-path: spec.containers.0.image", "put-value: nginx:2"),
		want:   strings.Replace(app, "image: nginx", "image: nginx:2", 1),
		result: fn.Results{mutated("nginx:2", "spec.containers.0.image", "app.yaml")},
	}, {
		name:   "put value at a path past the end of a list is reported all the same",
		config: config("by-path: spec.containers.1.image", "put-value: nginx:2"),
		want:   app,
		result: fn.Results{mutated("nginx:2", "spec.containers.1.image", "app.yaml")},
	}, {
		name:   "put comment on a list",
		config: config("by-path: '**.environments'", "put-comment: 'kpt-set: ${envs}'"),
		want:   strings.Replace(app, "  environments:\n", "  environments: # kpt-set: ${envs}\n", 1),
		result: fn.Results{result(`Mutated field value to "[dev, stage]"`, "**.environments # kpt-set: ${envs}", "app.yaml")},
	}, {
		name:   "put comment on a list whatever the value matcher",
		config: config("by-path: spec.environments", "by-value: none", "put-comment: 'kpt-set: ${envs}'"),
		want:   strings.Replace(app, "  environments:\n", "  environments: # kpt-set: ${envs}\n", 1),
		result: fn.Results{result(`Mutated field value to "[dev, stage]"`, "spec.environments # kpt-set: ${envs}", "app.yaml")},
	}, {
		name:   "put comment on a flow list leaves it in block style",
		config: config("by-path: spec.tags", "put-comment: 'kpt-set: ${tags}'"),
		want:   strings.Replace(app, "  tags: [a, b]\n", "  tags: # kpt-set: ${tags}\n  - a\n  - b\n", 1),
		result: fn.Results{result(`Mutated field value to "[a, b]"`, "spec.tags # kpt-set: ${tags}", "app.yaml")},
	}, {
		name:   "put comment misses a list whose key has a comment",
		config: config("by-path: spec.regions", "put-comment: 'kpt-set: ${regions}'"),
		want:   app,
		result: fn.Results{noMatches},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, app)
			require.True(t, ok, "results: %v", rl.Results)
			assert.Equal(t, strings.TrimSpace(tt.want), rl.Items.String())
			assert.Equal(t, tt.result, rl.Results)
		})
	}
}

func TestRunPutsValueOnEveryResource(t *testing.T) {
	const items = `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  annotations:
    config.kubernetes.io/path: a.yaml
    internal.config.kubernetes.io/path: a.yaml
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: b
  labels:
  annotations:
    config.kubernetes.io/path: b.yaml
    internal.config.kubernetes.io/path: b.yaml
`
	rl, ok := run(t, config("by-path: metadata.labels.tier", "put-value: web"), items)
	require.True(t, ok, "results: %v", rl.Results)
	// The null labels of b are left as they are, but b is reported too.
	assert.Equal(t, fn.Results{
		mutated("web", "metadata.labels.tier", "a.yaml"),
		mutated("web", "metadata.labels.tier", "b.yaml"),
	}, rl.Results)
	want := strings.Replace(items, "    internal.config.kubernetes.io/path: a.yaml\n",
		"    internal.config.kubernetes.io/path: a.yaml\n  labels:\n    tier: web\n", 1)
	assert.Equal(t, strings.TrimSpace(want), rl.Items.String())
}

func TestRunChangesUnreportedFieldsOfResourcesWithoutPath(t *testing.T) {
	const noPath = `apiVersion: v1
kind: Service
metadata:
  name: svc
spec:
  port: 80
`
	rl, ok := run(t, config("by-value: '80'", "put-value: '81'"), noPath)
	require.True(t, ok, "results: %v", rl.Results)
	assert.Equal(t, fn.Results{noMatches}, rl.Results)
	assert.Equal(t, strings.TrimSpace(strings.Replace(noPath, "80", "81", 1)), rl.Items.String())
}

func TestRunFails(t *testing.T) {
	tests := []struct {
		name   string
		config string
		reason string
	}{
		{"unknown key", config("by-name: x"), `invalid matcher "by-name", must be one of ["by-value" "by-file-path" "by-value-regex" "by-path" "put-value" "put-comment"]`},
		{"value and regex", config("by-value: a", "by-value-regex: a"), `only one of ["by-value", "by-value-regex"] can be provided`},
		{"bad regex", config("by-value-regex: '(a'"), "error parsing regexp: missing closing ): `(a`"},
		{"bad file pattern", config("by-file-path: '[a'", "by-value: a"), `syntax error in pattern`},
		{"unresolved capture group", config("by-value-regex: 'nginx-(.*)'", "put-value: '${1}-${2}'"), `unable to resolve capture groups`},
		{"put at a path through a value", config("by-path: spec.replicas.count", "put-value: '1'"), "wrong Node Kind for spec.replicas expected: MappingNode was ScalarNode: value: {3}"},
		{"put at a path through a list", config("by-path: spec.list.x.y", "put-value: '1'"), "wrong Node Kind for spec.list expected: MappingNode was SequenceNode: value: {- a\n- b}"},
		{"put at a path indexing a map", config("by-path: spec.0.x", "put-value: '1'"), "wrong Node Kind for spec expected: SequenceNode was MappingNode: value: {replicas: 3"},
		{"put at a path with a negative index", config("by-path: spec.list.-1.x", "put-value: '1'"), "array index -1 cannot be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok, err := runErr(t, tt.config, deployment)
			assert.False(t, ok)
			// v0.2.0's log: the error, twice.
			require.Error(t, err)
			assert.Equal(t, err.Error()+err.Error()+"\n", exitlog.Of(err))
			assert.True(t, strings.HasPrefix(err.Error(), tt.reason), "error: %v", err)
			require.Len(t, rl.Results, 1)
			assert.Equal(t, fn.Error, rl.Results[0].Severity)
			assert.True(t, strings.HasPrefix(rl.Results[0].Message,
				strings.TrimSuffix(fmt.Sprintf("failed to perform search-replace operation: %q", tt.reason), `"`)),
				"message: %s", rl.Results[0].Message)
			assert.Equal(t, strings.TrimSpace(deployment), rl.Items.String(), "items must be unchanged")
		})
	}
}
