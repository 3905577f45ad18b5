package fntest

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	sigsyaml "sigs.k8s.io/yaml"
)

// Items are a ResourceList's items as maps, as YAML 1.1 reads them (so
// that `on` and "on" differ), ordered by kind, namespace and name: what a
// test compares of a release's answer and fnrunner's, as the releases
// keep the input's order and the SDK orders items by file.
func Items(t testing.TB, resourceList []byte) []map[string]any {
	t.Helper()
	var rl struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, sigsyaml.Unmarshal(resourceList, &rl))
	key := func(m map[string]any) string {
		meta, _ := m["metadata"].(map[string]any)
		return fmt.Sprint(m["kind"], "/", meta["namespace"], "/", meta["name"])
	}
	sort.SliceStable(rl.Items, func(i, j int) bool { return key(rl.Items[i]) < key(rl.Items[j]) })
	return rl.Items
}
