package ensurenamesubstring_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/ensure-name-substring/ensurenamesubstring"
	"github.com/fnrunner/fnrunner/functions/internal/fntest"
)

// maxAllocated bounds what a run may allocate, parsing its input included:
// the binary-runner runs the function in its own process and admits it by
// its input's size. Parsing alone takes about 30 bytes for each byte of
// input, the copy of the resources that a failed run leaves alone about
// 20; kustomize's renaming of a resource about 15 KiB (it records the old
// name in annotations, each set through a YAML parse of its value) and its
// fixing of a reference about as much: ordinary small Deployments and
// ConfigMaps come to 230 in all.
func maxAllocated(input []byte) uint64 {
	return 256*uint64(len(input)) + fntest.AllocatedSlack
}

// prepend is a ConfigMap functionConfig prepending s.
func prepend(s string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  prepend: " + s + "\n"
}

// custom is an EnsureNameSubstring prepending s, with the given more lines.
func custom(s string, more ...string) string {
	return "apiVersion: fn.kpt.dev/v1alpha1\nkind: EnsureNameSubstring\nmetadata:\n  name: f\nsubstring: " + s + "\n" + strings.Join(more, "\n") + "\n"
}

// nameFields is additionalNameFields of n fields, depth fields deep,
// created.
func nameFields(n, depth int) string {
	var b strings.Builder
	b.WriteString("additionalNameFields:\n")
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
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: app
        image: nginx:1.2
        envFrom:
        - configMapRef:
            name: cm-%[1]d
      volumes:
      - name: config
        configMap:
          name: cm-%[1]d
`

const configMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-%[1]d
  namespace: ns
data:
  a: b
`

// hostileCase is a small input that asks for far more work than its size.
type hostileCase struct {
	name     string
	config   string
	items    []string
	tooLarge string // the failure's message, if it fails
}

// hostileCases are the inputs of TestHostileInputs and
// TestHostileInputsV011.
func hostileCases() []hostileCase {
	tiny := func(i int) string { return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d}", i) }
	// A Pod with 5000 volumes of one ConfigMap.
	volumes := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumes:\n" +
		strings.Repeat("  - {name: v, configMap: {name: cm}}\n", 5000)
	// A million maps, through aliases of aliases.
	aliases := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\nspec:\n" +
		"  x: &x [" + strings.Repeat("{}, ", 99) + "{}]\n" +
		"  y: &y [" + strings.Repeat("*x, ", 99) + "*x]\n" +
		"  a: [" + strings.Repeat("*y, ", 99) + "*y]\n"
	return []hostileCase{{
		name:   "ordinary: 300 Deployments and their ConfigMaps",
		config: prepend("dev-"),
		items:  ordinary(300),
	}, {
		// Each resource was checked against every one before it, and
		// each reference against every resource.
		name:   "2500 Deployments and their ConfigMaps",
		config: prepend("dev-"),
		items:  ordinary(2500),
	}, {
		// Each reference was added to a list on the ConfigMap, copied
		// anew each time.
		name:     "5000 references to one ConfigMap",
		config:   prepend("dev-"),
		items:    []string{tiny(0), strings.Replace(volumes, "name: cm}", "name: c0}", -1)},
		tooLarge: "names and references exceed",
	}, {
		name:     "a 100 KiB substring in 2000 names",
		config:   prepend(strings.Repeat("x", 100<<10)),
		items:    fntest.Many(2000, tiny),
		tooLarge: "names and references exceed",
	}, {
		name:     "100 name fields 20 deep in 2000 resources",
		config:   custom("dev-", nameFields(100, 20)),
		items:    fntest.Many(2000, tiny),
		tooLarge: "names and references exceed",
	}, {
		name:     "a name field through a million maps of aliases",
		config:   custom("dev-", "additionalNameFields:", "- path: spec/a/name", "  create: true"),
		items:    []string{aliases},
		tooLarge: "names and references exceed",
	}, {
		name:     "an EnsureNameSubstring of 10000 name fields",
		config:   custom("dev-", nameFields(10000, 1)),
		items:    fntest.Many(1, tiny),
		tooLarge: "an EnsureNameSubstring of about",
	}, {
		// A list that is its own item: an endless tree, which following
		// its aliases never ends (it overflowed the stack).
		name:     "a list aliasing itself",
		config:   prepend("dev-"),
		items:    []string{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: &x [*x]\n"},
		tooLarge: "names and references exceed",
	}, {
		name:     "a Pod whose volumes are an item of themselves",
		config:   prepend("dev-"),
		items:    []string{tiny(0), "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumes: &v [{name: v, configMap: {name: c0}}, *v]\n"},
		tooLarge: "names and references exceed",
	}}
}

// TestHostileInputs runs the hostile cases through RunUnstable: the run
// stays within maxAllocated, and either succeeds with an output in
// proportion to its input or fails with ErrTooLarge in its error result.
func TestHostileInputs(t *testing.T) {
	tests := hostileCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, _ := fntest.Measure(t, input, ensurenamesubstring.RunUnstable)
			assert.LessOrEqual(t, allocated, maxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				assert.False(t, ok)
				require.Len(t, rl.Results, 1)
				assert.Equal(t, fn.Error, rl.Results[0].Severity)
				assert.Contains(t, rl.Results[0].Message, tt.tooLarge)
				assert.Contains(t, rl.Results[0].Message, ensurenamesubstring.ErrTooLarge.Error())
				return
			}
			require.True(t, ok, "results: %v", rl.Results)
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}

// TestHostileInputsV011 runs the hostile cases through Run (v0.1.1, which
// writes no result): the same bounds, the failure in the error.
func TestHostileInputsV011(t *testing.T) {
	for _, tt := range hostileCases() {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, err := fntest.Measure(t, input, ensurenamesubstring.Run)
			assert.LessOrEqual(t, allocated, maxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				assert.False(t, ok)
				require.ErrorIs(t, err, ensurenamesubstring.ErrTooLarge)
				assert.ErrorContains(t, err, tt.tooLarge)
				assert.Empty(t, rl.Results)
				return
			}
			require.NoError(t, err)
			require.True(t, ok)
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}
