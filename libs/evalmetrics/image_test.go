package evalmetrics

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestImageNamer(t *testing.T) {
	n, err := NewImageNamer("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5")
	require.NoError(t, err)
	const name = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"
	tests := []struct {
		image string
		want  string // "" = not named
	}{
		{image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5", want: name},
		{image: "set-namespace:v0.4.5", want: name},
		{image: "set-namespace:v0.4.6"},
		{image: "set-namespace"},
		{image: "set-namespace:v0.4.5@sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		{image: "example.com/set-namespace:v0.4.5"},
		{image: "other:v0.4.5"},
		{image: "Not An Image"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, ok := n.FunctionName(tt.image)
			assert.Equal(t, tt.want != "", ok)
			assert.Equal(t, tt.want, got)
		})
	}

	none, err := NewImageNamer("")
	require.NoError(t, err)
	_, ok := none.FunctionName("set-namespace:v0.4.5")
	assert.False(t, ok, "a namer of no image names nothing")

	_, err = NewImageNamer("Not An Image")
	assert.Error(t, err)
}
