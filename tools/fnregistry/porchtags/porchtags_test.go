// Package porchtags holds docs/catalog.md's table of porch's tags to the
// FunctionConfigs porch ships (../shared/porch-manifests).
package porchtags

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// header is the first row of the table of porch's tags.
const header = "| function | porch's tags: go / binary / pod |"

// documented is the table: the cell of each function, by name.
func documented(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(harness.Source(t, "docs/catalog.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(data), header+"\n")
	require.True(t, ok, "docs/catalog.md has no table headed %q", header)
	rows := map[string]string{}
	for _, line := range strings.Split(table, "\n")[1:] {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 2 {
			break
		}
		rows[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	return rows
}

// cell is what the table says of a FunctionConfig of porch's.
func cell(t *testing.T, fc *unstructured.Unstructured) string {
	t.Helper()
	var parts []string
	for _, executor := range []string{"goExecutor", "binaryExecutor", "podExecutor"} {
		tags, _, err := unstructured.NestedStringSlice(fc.Object, "spec", executor, "tags")
		require.NoError(t, err)
		if len(tags) == 0 {
			parts = append(parts, "–")
			continue
		}
		parts = append(parts, strings.Join(tags, ", "))
	}
	return strings.Join(parts, " / ")
}

// TestTableIsPorchs compares each row of the table with porch's
// FunctionConfig of that name.
func TestTableIsPorchs(t *testing.T) {
	porchs := map[string]*unstructured.Unstructured{}
	for _, o := range porchfiles.Objects(t, "23-function-configurations.yaml") {
		porchs[o.GetName()] = o
	}
	rows := documented(t)
	require.NotEmpty(t, rows)
	for name, got := range rows {
		fc, ok := porchs[name]
		if !assert.True(t, ok, "porch ships no FunctionConfig %q", name) {
			continue
		}
		assert.Equal(t, cell(t, fc), got, "docs/catalog.md's porch tags of %s", name)
	}
}
