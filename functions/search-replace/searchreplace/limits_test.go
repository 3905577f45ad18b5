package searchreplace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/search-replace/searchreplace"
)

// outputSize is the size of rl's items and results as YAML.
func outputSize(t *testing.T, rl *fn.ResourceList) int {
	out, err := rl.ToYAML()
	require.NoError(t, err)
	return len(out)
}

// resource is a resource of file f.yaml with the given spec.
func resource(i int, spec string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: X\nmetadata:\n  name: x%d\n  annotations:\n    config.kubernetes.io/path: f.yaml\nspec: %s\n", i, spec)
}

// ordinary is an ordinary Deployment.
func ordinary(i int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%[1]d
  namespace: ns
  annotations:
    config.kubernetes.io/path: app-%[1]d.yaml
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: app
        image: nginx:1.2
        args: ["--port", "8080"]
        env:
        - name: A
          value: "b"
`, i)
}

// nested is spec, n maps deep, with a value beside each map.
func nested(n int) string {
	return strings.Repeat("{v: x, a: ", n) + "x" + strings.Repeat("}", n)
}

// TestHostileInputs runs small inputs that asked for far more work than
// their size: the run stays within fntest.MaxAllocated, and either succeeds
// with an output in proportion to its input or fails with ErrTooLarge.
func TestHostileInputs(t *testing.T) {
	// A key longer than 1024 bytes is written after "? ".
	wide := "\n  ? " + strings.Repeat("k", 100<<10) + "\n  : {" + strings.Join(fntest.Many(20000, func(i int) string { return fmt.Sprint("f", i, ": v") }), ", ") + "}"
	nestedLists := strings.Repeat("{l: [", 3000) + "x" + strings.Repeat("]}", 3000)
	tests := []struct {
		name     string
		config   string
		items    []string
		tooLarge string // the failure's message, if it fails
	}{{
		name:   "ordinary: by value in 300 Deployments",
		config: config("by-value: nginx:1.2", "put-value: nginx:1.3"),
		items:  fntest.Many(300, ordinary),
	}, {
		name:   "ordinary: every field of 100 Deployments",
		config: config("by-path: '**'"),
		items:  fntest.Many(100, ordinary),
	}, {
		// Each field's path was made anew, as long as its depth.
		name:   "5000 maps deep",
		config: config("by-value: y"),
		items:  fntest.Many(1, func(i int) string { return resource(i, nested(5000)) }),
	}, {
		name:   "a 100 KiB key above 20000 fields",
		config: config("by-value: y"),
		items:  fntest.Many(1, func(i int) string { return resource(i, wide) }),
	}, {
		// Each field's path was matched anew against by-path.
		name:   "by-path of 60 elements, 5000 maps deep",
		config: config("by-path: '"+strings.Repeat("**.", 59)+"v'", "by-value: y"),
		items:  fntest.Many(1, func(i int) string { return resource(i, nested(5000)) }),
	}, {
		name:     "by-path of 200 elements",
		config:   config("by-path: '" + strings.Repeat("**.", 199) + "v'"),
		items:    fntest.Many(1, func(i int) string { return resource(i, nested(100)) }),
		tooLarge: "by-path has 200 elements, more than 64",
	}, {
		name:     "a 100 KiB value put into 2000 fields",
		config:   config("by-value: v", "put-value: "+strings.Repeat("x", 100<<10)),
		items:    fntest.Many(2000, func(i int) string { return resource(i, "{a: v}") }),
		tooLarge: "matches and values exceed",
	}, {
		name:     "a 100 KiB value put at a path in 2000 resources",
		config:   config("by-path: spec.a", "put-value: "+strings.Repeat("x", 100<<10)),
		items:    fntest.Many(2000, func(i int) string { return resource(i, "{}") }),
		tooLarge: "matches and values exceed",
	}, {
		name:     "a path of 60 fields put into 10000 resources",
		config:   config("by-path: "+strings.Repeat("a.", 59)+"b", "put-value: x"),
		items:    fntest.Many(10000, func(i int) string { return resource(i, "{}") }),
		tooLarge: "matches and values exceed",
	}, {
		// A group's text for each of its references.
		name:     "20000 references to a 1 KiB capture group, 100 fields",
		config:   config("by-value-regex: '(.*)'", "put-value: '"+strings.Repeat("${1}", 20000)+"'"),
		items:    fntest.Many(100, func(i int) string { return resource(i, "{a: "+strings.Repeat("v", 1<<10)+"}") }),
		tooLarge: "matches and values exceed",
	}, {
		// Each list is written out for its result, lists in it included.
		name:     "a comment on lists 3000 deep",
		config:   config("by-path: '**'", "put-comment: c"),
		items:    fntest.Many(1, func(i int) string { return resource(i, nestedLists) }),
		tooLarge: "matches and values exceed",
	}, {
		name:     "by-value-regex of 10000 instructions",
		config:   config("by-value-regex: '" + strings.Repeat("x{1000}", 10) + "'"),
		items:    fntest.Many(1, func(i int) string { return resource(i, "{}") }),
		tooLarge: "by-value-regex compiles to about 100",
	}, {
		name:     "by-file-path of 2^22 alternatives",
		config:   config("by-file-path: '" + strings.Repeat("{a,a}", 22) + "c'"),
		items:    fntest.Many(1, func(i int) string { return resource(i, "{}") }),
		tooLarge: "by-file-path stands for more than 64 paths",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, err := fntest.Measure(t, input, searchreplace.Run)
			assert.LessOrEqual(t, allocated, fntest.MaxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				require.ErrorIs(t, err, searchreplace.ErrTooLarge)
				assert.False(t, ok)
				require.Len(t, rl.Results, 1)
				assert.Equal(t, fn.Error, rl.Results[0].Severity)
				assert.Contains(t, rl.Results[0].Message, tt.tooLarge)
				assert.Contains(t, rl.Results[0].Message, searchreplace.ErrTooLarge.Error())
				return
			}
			require.NoError(t, err)
			require.True(t, ok, "results: %v", rl.Results)
			assert.LessOrEqual(t, outputSize(t, rl), 8*len(input))
		})
	}
}
