package localstack_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tools/localstack"
)

// Addresses handed out are reserved: neither this process nor another
// picking ports the same way gets one twice while it runs.
func TestFreeAddressNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 300 {
		address, err := localstack.FreeAddress()
		require.NoError(t, err)
		assert.False(t, seen[address], "%s handed out twice", address)
		seen[address] = true
	}
}
