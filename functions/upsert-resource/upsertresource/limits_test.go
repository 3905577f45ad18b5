package upsertresource_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/upsert-resource/upsertresource"
)

// configMap is a ConfigMap of the given name, file and data.
func configMap(name, path, data string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: ns\n  annotations:\n    config.kubernetes.io/path: %s\ndata:\n  d: %s\n", name, path, data)
}

// TestHostileInputs runs small inputs that asked for far more work than
// their size: the run stays within fntest.MaxAllocated, and either succeeds
// with an output in proportion to its input or fails with ErrTooLarge.
func TestHostileInputs(t *testing.T) {
	list := func(items []string) string {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
		for _, it := range items {
			b.WriteString(fntest.Indent(it, "- ", "  "))
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
		items:  fntest.Many(2000, func(i int) string { return configMap(fmt.Sprint("cm-", i), "cm.yaml", "old") }),
	}, {
		// Each resource to upsert was compared with each item.
		name:   "3000 resources to upsert into 3000",
		config: list(fntest.Many(3000, func(i int) string { return configMap(fmt.Sprint("new-", i), "new.yaml", "x") })),
		items:  fntest.Many(3000, func(i int) string { return configMap(fmt.Sprint("old-", i), "old.yaml", "x") }),
	}, {
		// One copy of a large resource for each of many small ones.
		name:     "a 256 KiB resource replacing 2000 of the same identity",
		config:   configMap("cm", "", strings.Repeat("x", 256<<10)),
		items:    fntest.Many(2000, func(i int) string { return configMap("cm", fmt.Sprint("f", i, ".yaml"), "x") }),
		tooLarge: true,
	}, {
		name:     "a List of 200 copies of a 4 KiB resource, 2000 of its identity",
		config:   list(fntest.Many(200, func(int) string { return configMap("cm", "", strings.Repeat("x", 4<<10)) })),
		items:    fntest.Many(2000, func(i int) string { return configMap("cm", fmt.Sprint("f", i, ".yaml"), "x") }),
		tooLarge: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := fntest.HostileList(tt.config, tt.items)
			allocated, rl, _, err := fntest.Measure(t, input, upsertresource.Run)
			assert.LessOrEqual(t, allocated, fntest.MaxAllocated(input), "bytes allocated for %d bytes of input", len(input))
			if tt.tooLarge {
				require.ErrorIs(t, err, upsertresource.ErrTooLarge)
				require.Len(t, rl.Results, 1)
				assert.Contains(t, rl.Results[0].Message, "copies of the resources to upsert exceed")
				return
			}
			require.NoError(t, err)
			assert.LessOrEqual(t, fntest.OutputSize(rl), 2*len(input))
		})
	}
}
