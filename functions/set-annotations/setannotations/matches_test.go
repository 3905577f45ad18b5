package setannotations_test

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
	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

// TestMatchesV014 runs RunV014 on each input of testdata/v0.1.4 and
// compares its answer and its log with the v0.1.4 release's (see the
// README there).
func TestMatchesV014(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "v0.1.4", "*.in.yaml"))
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
			out, err := fn.Run(fn.ResourceListProcessorFunc(setannotations.RunV014), input)
			assert.Equal(t, statErr == nil, err != nil, "the release failed: %v; RunV014: %v", statErr == nil, err)
			if err != nil {
				assert.Equal(t, string(log), exitlog.Of(err), "the binary's log")
			}
			assert.Equal(t, answer(t, want), answer(t, out))
		})
	}
}

// resourceList is what TestMatchesV014 compares of a ResourceList: its
// items (fntest.Items), and its results, a list or the items of kyaml
// v0.10's {name, items}, as YAML 1.2 reads them (as kpt does: an earlier
// function's results come back written anew).
type resourceList struct {
	Items   []map[string]any
	Results []any
}

func answer(t *testing.T, data []byte) resourceList {
	t.Helper()
	var results struct {
		Results any `yaml:"results"`
	}
	require.NoError(t, yaml.Unmarshal(data, &results))
	out := resourceList{Items: fntest.Items(t, data)}
	switch r := results.Results.(type) {
	case []any:
		out.Results = r
	case map[string]any:
		out.Results, _ = r["items"].([]any)
	}
	if len(out.Items) == 0 {
		out.Items = nil
	}
	return out
}
