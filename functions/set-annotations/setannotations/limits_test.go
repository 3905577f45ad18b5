package setannotations_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

// maxAllocated bounds what a run may allocate, parsing its input included:
// the binary-runner runs the function in its own process and admits it by
// its input's size. Parsing alone takes about 30 bytes for each byte of
// input, the copy of the resources that a failed run leaves alone about 20,
// and kustomize's reading of resources and field specs about 30 for small
// resources (ordinary ConfigMaps come to 80 in all).
func maxAllocated(input []byte) uint64 {
	return 96*uint64(len(input)) + fntest.AllocatedSlack
}

// annotationsConfig is a SetAnnotations of n annotations of values of the
// given size, and the given more lines.
func annotationsConfig(n, size int, more ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: fn.kpt.dev/v1alpha1\nkind: SetAnnotations\nmetadata:\n  name: annotations\nannotations:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  annotation-%d: %s\n", i, strings.Repeat("v", size))
	}
	for _, line := range more {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// fieldSpecs is additionalAnnotationFields of n fields, depth fields deep,
// created.
func fieldSpecs(n, depth int) string {
	var b strings.Builder
	b.WriteString("additionalAnnotationFields:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "- path: %sf%d\n  create: true\n", strings.Repeat("a/", depth-1), i)
	}
	return b.String()
}

// ordinary is n ordinary Deployments, each with its ConfigMap.
func ordinary(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf(deployment, i), fmt.Sprintf(configMap, i))
	}
	return out
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%[1]d
  namespace: ns
  labels:
    app: app-%[1]d
spec:
  replicas: 3
  selector:
    matchLabels:
      app: app-%[1]d
  template:
    metadata:
      labels:
        app: app-%[1]d
    spec:
      containers:
      - name: app
        image: nginx:1.2
        args: ["--port", "8080"]
        env:
        - name: A
          valueFrom:
            configMapKeyRef:
              name: cm-%[1]d
              key: a
`

const configMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-%[1]d
  namespace: ns
data:
  a: b
`

// TestHostileInputs runs small inputs that asked for far more work than
// their size: the run stays within maxAllocated, and either succeeds with
// an output in proportion to its input or fails with ErrTooLarge.
func TestHostileInputs(t *testing.T) {
	tiny := func(i int) string { return fmt.Sprintf("kind: A\nmetadata: {name: a%d}", i) }
	small := func(i int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\n  namespace: ns\n  annotations:\n    config.kubernetes.io/path: cm.yaml\ndata:\n  key: value\n", i)
	}
	// A template of a million maps, through aliases of aliases.
	aliases := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n" +
		"  x: &x [" + strings.Repeat("{}, ", 99) + "{}]\n" +
		"  y: &y [" + strings.Repeat("*x, ", 99) + "*x]\n" +
		"  template: [" + strings.Repeat("*y, ", 99) + "*y]\n"
	tests := []struct {
		name     string
		config   string
		items    []string
		tooLarge string // the failure's message, if it fails
	}{{
		name:   "ordinary: 3 annotations on 300 Deployments",
		config: annotationsConfig(3, 8),
		items:  ordinary(300),
	}, {
		// Each resource was checked against every one before it.
		name:   "5000 resources",
		config: annotationsConfig(3, 8),
		items:  fntest.Many(5000, small),
	}, {
		name:     "200 annotations on 2000 resources",
		config:   annotationsConfig(200, 1),
		items:    fntest.Many(2000, tiny),
		tooLarge: "annotations to set exceed",
	}, {
		// Each annotation is looked for in every field's path.
		name:     "100 fields 20 deep on 2000 resources",
		config:   annotationsConfig(1, 1, fieldSpecs(100, 20)),
		items:    fntest.Many(2000, tiny),
		tooLarge: "annotations to set exceed",
	}, {
		name:     "300 annotations on 300 fields of one resource",
		config:   annotationsConfig(300, 1, fieldSpecs(300, 1)),
		items:    fntest.Many(1, tiny),
		tooLarge: "annotations to set exceed",
	}, {
		name:     "a 100 KiB annotation on 2000 resources",
		config:   annotationsConfig(1, 100<<10),
		items:    fntest.Many(2000, tiny),
		tooLarge: "annotations to set exceed",
	}, {
		// Each annotations field is searched for each annotation.
		name:     "5000 annotations",
		config:   annotationsConfig(5000, 1),
		items:    fntest.Many(1, tiny),
		tooLarge: "5000 annotations, more than 1024",
	}, {
		name:     "a SetAnnotations of 10000 fields",
		config:   annotationsConfig(1, 1, fieldSpecs(10000, 1)),
		items:    fntest.Many(1, tiny),
		tooLarge: "a SetAnnotations of about",
	}, {
		name:     "a pod template of a million maps through aliases",
		config:   annotationsConfig(1, 1),
		items:    []string{aliases},
		tooLarge: "annotations to set exceed",
	}, {
		// A list that is its own item: an endless tree, which following
		// its aliases never ends (it overflowed the stack).
		name:     "a list aliasing itself",
		config:   annotationsConfig(1, 1),
		items:    []string{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: &x [*x]\n"},
		tooLarge: "annotations to set exceed",
	}, {
		name:     "metadata aliasing itself",
		config:   annotationsConfig(1, 1),
		items:    []string{"apiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: c, labels: {a: *m}}\n"},
		tooLarge: "annotations to set exceed",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, err := fntest.Measure(t, input, setannotations.Run)
			require.NoError(t, err)
			assert.LessOrEqual(t, allocated, maxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				assert.False(t, ok)
				require.Len(t, rl.Results, 1)
				assert.Equal(t, fn.Error, rl.Results[0].Severity)
				assert.Contains(t, rl.Results[0].Message, tt.tooLarge)
				assert.Contains(t, rl.Results[0].Message, setannotations.ErrTooLarge.Error())
				return
			}
			require.True(t, ok, "results: %v", rl.Results)
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}
