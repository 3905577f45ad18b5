package searchreplace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/search-replace/searchreplace"
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
	require.NoError(t, err)
	return rl, ok
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

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  annotations:
    config.kubernetes.io/path: app/deployment.yaml
    internal.config.kubernetes.io/path: app/deployment.yaml
    config.kubernetes.io/index: '3'
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
		{"by value regex matches whole values", config("by-value-regex: nginx-(.*)"), fn.Results{
			matched("nginx-deployment", "metadata.name", "app/deployment.yaml"),
			matched("nginx-service", "metadata.name", "setters.yaml"),
		}},
		{"by value regex with its own anchors", config("by-value-regex: '^.*nginx.*$'"), fn.Results{
			matched("nginx-deployment", "metadata.name", "app/deployment.yaml"),
			matched("my-nginx-app:1", "spec.template.spec.containers[0].image", "app/deployment.yaml"),
			matched("nginx-service", "metadata.name", "setters.yaml"),
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
		{"kpt's annotations are not searched", config("by-value: setters.yaml"), fn.Results{noMatches}},
		{"no matchers", config("put-value: foo"), fn.Results{noMatches}},
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

func TestRunReplaces(t *testing.T) {
	const app = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: foo1-dev-bar1-us-east-1-baz1
  namespace: "foo2-dev-bar2-us-east-1-baz2"
  annotations:
    config.kubernetes.io/path: app.yaml
spec:
  replicas: 3 # scale
  environments:
  - dev
  - stage
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
		config: config("by-path: spec.replicas", "put-value: four"),
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
		name:   "put value at a path sets the field",
		config: config("by-path: spec.replicas", "put-value: '5'", "put-comment: 'kpt-set: ${replicas}'"),
		want:   strings.Replace(app, "replicas: 3 # scale", "replicas: 5 # kpt-set: ${replicas}", 1),
		result: fn.Results{mutated("5 # kpt-set: ${replicas}", "spec.replicas", "app.yaml")},
	}, {
		name:   "put comment on a list",
		config: config("by-path: '**.environments'", "put-comment: 'kpt-set: ${envs}'"),
		want:   strings.Replace(app, "  environments:\n", "  environments: # kpt-set: ${envs}\n", 1),
		result: fn.Results{result(`Mutated field value to "[dev, stage]"`, "**.environments # kpt-set: ${envs}", "app.yaml")},
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

func TestRunFails(t *testing.T) {
	tests := []struct {
		name   string
		config string
		reason string
	}{
		{"unknown key", config("by-name: x"), `invalid matcher "by-name", must be one of ["by-value" "by-file-path" "by-value-regex" "by-path" "put-value" "put-comment"]`},
		{"value and regex", config("by-value: a", "by-value-regex: a"), `only one of ["by-value", "by-value-regex"] can be provided`},
		{"bad regex", config("by-value-regex: '(a'"), "invalid by-value-regex \"(a\": error parsing regexp: missing closing ): `^(?:(a)$`"},
		{"bad file pattern", config("by-file-path: '[a'", "by-value: a"), `invalid by-file-path "[a": syntax error in pattern`},
		{"unresolved capture group", config("by-value-regex: 'nginx-(.*)'", "put-value: '${1}-${2}'"), `Deployment/nginx-deployment: metadata.name: unable to resolve capture groups in "${1}-${2}"`},
		{"put at a path through a value", config("by-path: spec.replicas.count", "put-value: '1'"), `Deployment/nginx-deployment: spec.replicas.count: field "replicas" is a scalar, not a map`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, ok := run(t, tt.config, deployment)
			assert.False(t, ok)
			assert.Equal(t, fn.Results{{
				Message:  fmt.Sprintf("failed to perform search-replace operation: %q", tt.reason),
				Severity: fn.Error,
			}}, rl.Results)
			assert.Equal(t, strings.TrimSpace(deployment), rl.Items.String(), "items must be unchanged")
		})
	}
}
