package setlabels_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/set-labels/setlabels"
)

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
// their size: the run stays within fntest.MaxAllocated, and either succeeds
// with an output in proportion to its input or fails with ErrTooLarge.
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
		items:  fntest.Many(1, tiny),
	}, {
		// Every label on three fields of every Deployment.
		name:     "200 labels on 2000 Deployments",
		config:   labelsConfig(200, 1),
		items:    fntest.Many(2000, tiny),
		tooLarge: "labels to set exceed",
	}, {
		// Each label field is searched for each label.
		name:     "5000 labels on one resource",
		config:   labelsConfig(5000, 1),
		items:    fntest.Many(1, tiny),
		tooLarge: "5000 labels, more than 1024",
	}, {
		name:     "a 100 KiB label on 200 Deployments",
		config:   labelsConfig(1, 100<<10),
		items:    fntest.Many(200, tiny),
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
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, err := fntest.Measure(t, input, setlabels.Run)
			require.NoError(t, err)
			assert.LessOrEqual(t, allocated, fntest.MaxAllocated(input), "bytes allocated for %d bytes of input", len(input))
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
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}
