package regexpsize

import (
	"regexp/syntax"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInstructions(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    int
	}{
		{"abc", 3},
		{"a|bc", 4},
		{"(a){10}", 20},
		{"a{1000}", 1000},
		{"[a-z]+x*", 5},
	} {
		re, err := syntax.Parse(tc.pattern, syntax.Perl)
		require.NoError(t, err)
		assert.Equal(t, tc.want, Instructions(re), tc.pattern)
	}
}
