package fntest_test

import (
	"fmt"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/fntest"
)

func TestHostileList(t *testing.T) {
	config := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n"
	items := fntest.Many(3, func(i int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\n", i)
	})
	input := fntest.HostileList(config, items)
	allocated, rl, ok, err := fntest.Measure(t, input, func(rl *fn.ResourceList) (bool, error) {
		return len(rl.Items) == 3, nil
	})
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Positive(t, allocated)
	assert.LessOrEqual(t, allocated, fntest.MaxAllocated(input))
	assert.Equal(t, "c", rl.FunctionConfig.GetName())
	for i, o := range rl.Items {
		assert.Equal(t, fmt.Sprint("cm-", i), o.GetName())
	}
	assert.Equal(t, len(items[0])*3, fntest.OutputSize(rl))
}

func TestIndent(t *testing.T) {
	assert.Equal(t, "- a: b\n  c: d\n", fntest.Indent("a: b\nc: d\n\n", "- ", "  "))
}
