package treesize_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

func parse(t *testing.T, s string) *yaml.Node {
	t.Helper()
	rn, err := yaml.Parse(s)
	require.NoError(t, err)
	return rn.YNode()
}

func TestBytes(t *testing.T) {
	n := parse(t, "a: bc # d\n")
	assert.Equal(t, 3*treesize.NodeBytes+len("a")+len("bc")+len("# d"), treesize.Bytes(n))
	assert.Equal(t, 3*4+len("a")+len("bc")+len("# d"), treesize.TextBytes(n))
	assert.Zero(t, treesize.Bytes(nil))
	assert.Zero(t, treesize.TextBytes(nil))
}

func TestAliases(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		wantExtra int
		wantCycle bool
	}{{
		name: "no aliases",
		yaml: "a: [1, 2]\n",
	}, {
		// The alias reaches the list and its two items.
		name:      "an alias",
		yaml:      "a: &x [1, 2]\nb: *x\n",
		wantExtra: 3,
	}, {
		// y's aliases of x each reach x's list and its two items; each
		// alias of y reaches y's list and its two aliases, with what
		// they reach.
		name:      "aliases of aliases",
		yaml:      "x: &x [1, 2]\ny: &y [*x, *x]\nz: [*y, *y]\n",
		wantExtra: 2*3 + 2*(1+2*4),
	}, {
		name:      "a list aliasing itself",
		yaml:      "a: &x [1, *x]\n",
		wantExtra: treesize.MaxReached,
		wantCycle: true,
	}, {
		name:      "a map aliasing itself under a key",
		yaml:      "metadata: &m {name: x, annotations: {a: *m}}\n",
		wantExtra: treesize.MaxReached,
		wantCycle: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := treesize.Aliases{}
			a.Reached(parse(t, tt.yaml))
			assert.Equal(t, tt.wantExtra, a.Extra)
			assert.Equal(t, tt.wantCycle, a.Cycle)
		})
	}
	assert.Equal(t, treesize.MaxReached*treesize.NodeBytes, treesize.AliasBytes(parse(t, "a: &x [*x]\n")))
}
