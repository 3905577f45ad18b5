package searchreplace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/internal/fntest"
	"github.com/fnrunner/fnrunner/functions/search-replace/searchreplace"
)

// TestMatchesV020 runs Run on each input of testdata/v0.2.0 and compares
// its answer and its log with the v0.2.0 release's (see the README there).
func TestMatchesV020(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "v0.2.0", "*.in.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	for _, in := range inputs {
		base := strings.TrimSuffix(in, ".in.yaml")
		t.Run(filepath.Base(base), func(t *testing.T) {
			input, err := os.ReadFile(in)
			require.NoError(t, err)
			want, err := os.ReadFile(base + ".out.yaml")
			require.NoError(t, err)
			log, statErr := os.ReadFile(base + ".fails")
			out, err := fn.Run(fn.ResourceListProcessorFunc(searchreplace.Run), input)
			assert.Equal(t, statErr == nil, err != nil, "the release failed: %v; Run: %v", statErr == nil, err)
			if err != nil {
				assert.Equal(t, string(log), exitlog.Of(err), "the binary's log")
			}
			assert.Equal(t, fntest.Items(t, want), fntest.Items(t, out))
			assert.Equal(t, results(t, want), results(t, out))
		})
	}
}

// results are a ResourceList's results: a list, or the items of kyaml
// v0.10's {name, items}.
func results(t *testing.T, data []byte) []any {
	t.Helper()
	var rl struct {
		Results any `yaml:"results"`
	}
	require.NoError(t, yaml.Unmarshal(data, &rl))
	switch r := rl.Results.(type) {
	case []any:
		return r
	case map[string]any:
		items, _ := r["items"].([]any)
		return items
	}
	return nil
}
