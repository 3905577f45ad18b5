package admission

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFit(t *testing.T) {
	// The shipped binary-runner: 512 MiB in flight, 256 MiB queued.
	f := Flags{MaxInFlightBytes: 512 << 20, MaxQueueBytes: 256 << 20}
	tests := []struct {
		name     string
		limit    uint64
		ok       bool
		headroom int64
		fits     bool
	}{
		{"within deploy/'s 1 GiB", 1 << 30, true, 220 << 20, true},
		{"exactly the limit", 1 << 30, true, 256 << 20, true},
		{"over it", 1 << 30, true, 257 << 20, false},
		{"no limit set", 0, false, 1 << 40, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.Fit(tt.limit, tt.ok, tt.headroom)
			if tt.fits {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOverContainer)
			assert.Contains(t, err.Error(), "over the 1024 MiB limit of its cgroup")
		})
	}
}
