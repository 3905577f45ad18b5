package upsertresource_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/upsert-resource/upsertresource"
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
func measure(t *testing.T, input []byte) (allocated uint64, rl *fn.ResourceList, err error) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rl, err = fn.ParseResourceList(input)
	require.NoError(t, err)
	_, err = upsertresource.Run(rl)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, rl, err
}

// outputSize is the size of rl's items as YAML.
func outputSize(rl *fn.ResourceList) int {
	size := 0
	for _, o := range rl.Items {
		size += len(o.String())
	}
	return size
}

// configMap is a ConfigMap of the given name, file and data.
func configMap(name, path, data string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: ns\n  annotations:\n    config.kubernetes.io/path: %s\ndata:\n  d: %s\n", name, path, data)
}

// TestHostileInputs runs small inputs that asked for far more work than
// their size: the run stays within maxAllocated, and either succeeds with
// an output in proportion to its input or fails with ErrTooLarge.
func TestHostileInputs(t *testing.T) {
	many := func(n int, item func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = item(i)
		}
		return out
	}
	list := func(items []string) string {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
		for _, it := range items {
			b.WriteString(indent(it, "- ", "  "))
		}
		return b.String()
	}
	tests := []struct {
		name     string
		config   string
		items    []string
		tooLarge bool
	}{{
		name:   "a package of 2000 resources",
		config: configMap("cm-7", "cm.yaml", "new"),
		items:  many(2000, func(i int) string { return configMap(fmt.Sprint("cm-", i), "cm.yaml", "old") }),
	}, {
		// Each resource to upsert was compared with each item.
		name:   "3000 resources to upsert into 3000",
		config: list(many(3000, func(i int) string { return configMap(fmt.Sprint("new-", i), "new.yaml", "x") })),
		items:  many(3000, func(i int) string { return configMap(fmt.Sprint("old-", i), "old.yaml", "x") }),
	}, {
		// One copy of a large resource for each of many small ones.
		name:     "a 256 KiB resource replacing 2000 of the same identity",
		config:   configMap("cm", "", strings.Repeat("x", 256<<10)),
		items:    many(2000, func(i int) string { return configMap("cm", fmt.Sprint("f", i, ".yaml"), "x") }),
		tooLarge: true,
	}, {
		name:     "a List of 200 copies of a 4 KiB resource, 2000 of its identity",
		config:   list(many(200, func(int) string { return configMap("cm", "", strings.Repeat("x", 4<<10)) })),
		items:    many(2000, func(i int) string { return configMap("cm", fmt.Sprint("f", i, ".yaml"), "x") }),
		tooLarge: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := hostileList(tt.config, tt.items)
			allocated, rl, err := measure(t, input)
			t.Logf("%d bytes of input: %d bytes allocated (%.1f times)", len(input), allocated, float64(allocated)/float64(len(input)))
			assert.LessOrEqual(t, allocated, maxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge {
				require.ErrorIs(t, err, upsertresource.ErrTooLarge)
				require.Len(t, rl.Results, 1)
				assert.Contains(t, rl.Results[0].Message, "copies of the resources to upsert exceed")
				return
			}
			require.NoError(t, err)
			assert.LessOrEqual(t, outputSize(rl), 2*len(input))
		})
	}
}
