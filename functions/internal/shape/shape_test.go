package shape_test

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/shape"
)

func TestIsList(t *testing.T) {
	for value, want := range map[string]bool{
		"[]":       true,
		"[x]":      true,
		"[a, b]":   true,
		"[[x]]":    true,
		"[{a: b}]": true,
		"{}":       false,
		"{a: b}":   false,
		"x":        false,
		"null":     false,
	} {
		o, err := fn.ParseKubeObject([]byte("apiVersion: v1\nkind: ConfigMap\nspec:\n  template: " + value + "\n"))
		require.NoError(t, err)
		assert.Equal(t, want, shape.IsList(&o.SubObject, "spec", "template"), value)
	}
}

func TestCheckMetadata(t *testing.T) {
	for _, tc := range []struct {
		object string
		err    string
	}{
		{"kind: A\nmetadata:\n  name: a\n  labels: {a: b}\n  annotations: {a: b}\n", ""},
		{"kind: A\n", ""},
		{"kind: A\nmetadata: [x]\n", `resource 1 (kind "A"): metadata: a list where a map was expected`},
		{"kind: A\nmetadata:\n  labels: [x]\n", `resource 1 (kind "A"): metadata.labels: a list where a map was expected`},
		{"kind: A\nmetadata:\n  annotations: [{a: b}]\n", `resource 1 (kind "A"): metadata.annotations: a list where a map was expected`},
	} {
		good, err := fn.ParseKubeObject([]byte("kind: B\nmetadata:\n  name: b\n"))
		require.NoError(t, err)
		o, err := fn.ParseKubeObject([]byte(tc.object))
		require.NoError(t, err)
		err = shape.CheckMetadata(fn.KubeObjects{good, o})
		if tc.err == "" {
			assert.NoError(t, err, tc.object)
			continue
		}
		assert.ErrorIs(t, err, shape.ErrList, tc.object)
		assert.EqualError(t, err, tc.err, tc.object)
	}
}
