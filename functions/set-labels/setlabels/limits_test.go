package setlabels_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/set-labels/setlabels"
)

// maxAllocated bounds what a run may allocate, parsing its input included:
// the binary-runner runs the function in its own process and admits it by
// its input's size. Parsing alone takes about 30 bytes for each byte of
// input.
func maxAllocated(input []byte) uint64 {
	return 64*uint64(len(input)) + 16<<20
}

// hostileList is a ResourceList of config and items (YAML documents).
func hostileList(config string, items []string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nfunctionConfig:\n")
	b.WriteString(indent(config, "  ", "  "))
	b.WriteString("items:\n")
	for _, it := range items {
		b.WriteString(indent(it, "- ", "  "))
	}
	return []byte(b.String())
}

// indent prefixes doc's first line with first and the others with rest.
func indent(doc, first, rest string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		if i == 0 {
			b.WriteString(first)
		} else {
			b.WriteString(rest)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// measure parses input and runs the function on it, as the binary-runner
// does before it writes the output (which it bounds), and returns the
// bytes allocated.
func measure(t *testing.T, input []byte) (allocated uint64, rl *fn.ResourceList, ok bool) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rl, err := fn.ParseResourceList(input)
	require.NoError(t, err)
	ok, err = setlabels.Run(rl)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	return after.TotalAlloc - before.TotalAlloc, rl, ok
}

// outputSize is the size of rl's items as YAML.
func outputSize(rl *fn.ResourceList) int {
	size := 0
	for _, o := range rl.Items {
		size += len(o.String())
	}
	return size
}

func many(n int, item func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = item(i)
	}
	return out
}

// labelsConfig is a ConfigMap of n labels of values of the given size.
func labelsConfig(n, size int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: labels\ndata:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  label-%d: %s\n", i, strings.Repeat("v", size))
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
	tiny := func(i int) string { return fmt.Sprintf("kind: Deployment\nmetadata: {name: d%d}", i) }
	networkPolicy := func(peers int) string {
		var b strings.Builder
		b.WriteString("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\nspec:\n  ingress:\n  - from:\n")
		for i := 0; i < peers; i++ {
			b.WriteString("    - podSelector: {matchLabels: {a: b}}\n")
		}
		return b.String()
	}
	tests := []struct {
		name     string
		config   string
		items    []string
		tooLarge string // the failure's message, if it fails
	}{{
		name:   "ordinary: 3 labels on 300 Deployments",
		config: labelsConfig(3, 8),
		items:  ordinary(300),
	}, {
		name:   "1024 labels on one resource",
		config: labelsConfig(1024, 1),
		items:  many(1, tiny),
	}, {
		// Every label on three fields of every Deployment.
		name:     "200 labels on 2000 Deployments",
		config:   labelsConfig(200, 1),
		items:    many(2000, tiny),
		tooLarge: "labels to set exceed",
	}, {
		// Each label field is searched for each label.
		name:     "5000 labels on one resource",
		config:   labelsConfig(5000, 1),
		items:    many(1, tiny),
		tooLarge: "5000 labels, more than 1024",
	}, {
		name:     "a 100 KiB label on 200 Deployments",
		config:   labelsConfig(1, 100<<10),
		items:    many(200, tiny),
		tooLarge: "labels to set exceed",
	}, {
		// Each label is looked up in each peer's selector.
		name:     "1000 labels looked up in 20000 NetworkPolicy peers",
		config:   labelsConfig(1000, 1),
		items:    []string{networkPolicy(20000)},
		tooLarge: "labels to set exceed",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := hostileList(tt.config, tt.items)
			allocated, rl, ok := measure(t, input)
			t.Logf("%d bytes of input: %d bytes allocated (%.1f times)", len(input), allocated, float64(allocated)/float64(len(input)))
			assert.LessOrEqual(t, allocated, maxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				assert.False(t, ok)
				require.NotEmpty(t, rl.Results)
				last := rl.Results[len(rl.Results)-1]
				assert.Equal(t, fn.Error, last.Severity)
				assert.Contains(t, last.Message, tt.tooLarge)
				assert.Contains(t, last.Message, setlabels.ErrTooLarge.Error())
				return
			}
			require.True(t, ok, "results: %v", rl.Results)
			assert.LessOrEqual(t, outputSize(rl), 2*len(input))
		})
	}
}
