package setimage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/set-image/setimage"
)

// maxAllocated bounds what a run may allocate, parsing its input included:
// the binary-runner runs the function in its own process and admits it by
// its input's size. Parsing alone takes about 30 bytes for each byte of
// input. With additional image fields, the catalog's JSON round trip of
// every resource (which this function keeps, see setAdditionalImages)
// costs 700 to 2000 more: roundTrip.
func maxAllocated(input []byte, roundTrip bool) uint64 {
	if roundTrip {
		return 2048*uint64(len(input)) + fntest.AllocatedSlack
	}
	return fntest.MaxAllocated(input)
}

// imageConfig is a SetImage of image name, to newTag 2, with the given
// more lines.
func imageConfig(name string, more ...string) string {
	return "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetImage\nmetadata:\n  name: f\nimage:\n  name: '" + name + "'\n  newTag: '2'\n" + strings.Join(more, "\n") + "\n"
}

// podOf is a Pod of n containers of the given image, with a comment.
func podOf(n int, image string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p # the pod\nspec:\n  containers:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: c%d, image: '%s'}\n", i, image)
	}
	return b.String()
}

// ordinary is n ordinary Deployments.
func ordinary(n int) []string {
	return fntest.Many(n, func(i int) string { return fmt.Sprintf(ordinaryDeployment, i) })
}

const ordinaryDeployment = `apiVersion: apps/v1
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
        image: nginx:1.2 # the image
        args: ["--port", "8080"]
        env:
        - name: A
          value: "b"
`

// TestHostileInputs runs small inputs that asked for far more work than
// their size: the run stays within maxAllocated, and either succeeds with
// an output in proportion to its input or fails with ErrTooLarge.
func TestHostileInputs(t *testing.T) {
	wide := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: wide}\ndata:\n" +
		strings.Join(fntest.Many(20000, func(i int) string { return fmt.Sprintf("  k%d: v", i) }), "\n")
	additional := []string{"additionalImageFields:", "- path: spec/containers[]/image"}
	tests := []struct {
		name      string
		config    string
		items     []string
		roundTrip bool
		tooLarge  string // the failure's message, if it fails
	}{{
		name:   "ordinary: 300 Deployments",
		config: imageConfig("nginx"),
		items:  ordinary(300),
	}, {
		name:      "ordinary: 100 Deployments, additional image fields",
		config:    imageConfig("nginx", "additionalImageFields: []"),
		items:     ordinary(100),
		roundTrip: true,
	}, {
		// kyaml's comment copy looked each container up in the list.
		name:      "4000 containers, additional image fields",
		config:    imageConfig("nginx", additional...),
		items:     []string{podOf(4000, "nginx")},
		roundTrip: true,
	}, {
		// kyaml's order sync looked each field up in the map.
		name:      "20000 fields, additional image fields",
		config:    imageConfig("nginx", "additionalImageFields: []"),
		items:     []string{wide},
		roundTrip: true,
	}, {
		// An anchor, which the round trip expands: kyaml restores the
		// comments.
		name:      "4000 containers and an anchor, additional image fields",
		config:    imageConfig("nginx", additional...),
		items:     []string{strings.Replace(podOf(4000, "nginx"), "name: p # the pod", "name: p # the pod\n  labels: &labels {a: b}", 1)},
		roundTrip: true,
		tooLarge:  "the maps and lists to restore after the JSON round trip exceed",
	}, {
		name:      "20000 fields and an anchor, additional image fields",
		config:    imageConfig("nginx", "additionalImageFields: []"),
		items:     []string{strings.Replace(wide, "{name: wide}", "{name: wide, labels: &labels {a: b}}", 1)},
		roundTrip: true,
		tooLarge:  "the maps and lists to restore after the JSON round trip exceed",
	}, {
		// Kustomize compiled the name at each image field.
		name:      "a 900 byte name, 300 additional image fields",
		config:    imageConfig(strings.Repeat("x", 900), additional...),
		items:     []string{podOf(300, "y")},
		roundTrip: true,
	}, {
		name:     "a 5 KiB name",
		config:   imageConfig(strings.Repeat("x", 5000)),
		items:    []string{podOf(1, "y")},
		tooLarge: "image `name` is 5000 bytes, more than 4096",
	}, {
		// Each image was matched against 10000 instructions.
		name:     "a name of 10000 instructions",
		config:   imageConfig(strings.Repeat("x{1000}", 10)),
		items:    []string{podOf(2000, strings.Repeat("x", 900))},
		tooLarge: "image `name` compiles to about 100",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, ok, err := fntest.Measure(t, input, setimage.Run)
			require.NoError(t, err)
			assert.LessOrEqual(t, allocated, maxAllocated(input, tt.roundTrip), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge != "" {
				assert.False(t, ok)
				require.NotEmpty(t, rl.Results)
				last := rl.Results[len(rl.Results)-1]
				assert.Equal(t, fn.Error, last.Severity)
				assert.Contains(t, last.Message, tt.tooLarge)
				assert.Contains(t, last.Message, setimage.ErrTooLarge.Error())
				return
			}
			require.True(t, ok, "results: %v", rl.Results)
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}
