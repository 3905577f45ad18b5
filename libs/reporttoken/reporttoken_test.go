package reporttoken

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
)

func TestTokenTravelsInMetadata(t *testing.T) {
	out, _ := metadata.FromOutgoingContext(Attach(context.Background(), "tok"))
	tok, err := FromIncoming(metadata.NewIncomingContext(context.Background(), out))
	require.NoError(t, err)
	assert.Equal(t, "tok", tok)

	for name, md := range map[string]metadata.MD{
		"none":     nil,
		"no value": metadata.Pairs("authorization", "Bearer "),
		"basic":    metadata.Pairs("authorization", "Basic dTpw"),
		"two":      metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"),
	} {
		_, err := FromIncoming(metadata.NewIncomingContext(context.Background(), md))
		assert.ErrorIs(t, err, ErrNoToken, name)
	}
	_, err = FromIncoming(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+strings.Repeat("x", MaxBytes+1))))
	assert.ErrorIs(t, err, ErrTooLarge)
}

func TestFileIsReadOnEveryUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	f := File(path)
	_, err := f.Token()
	assert.Error(t, err, "no file yet")
	require.NoError(t, os.WriteFile(path, []byte("one\n"), 0o600))
	tok, err := f.Token()
	require.NoError(t, err)
	assert.Equal(t, "one", tok)
	require.NoError(t, os.WriteFile(path, []byte("two"), 0o600)) // the kubelet rotated it
	tok, err = f.Token()
	require.NoError(t, err)
	assert.Equal(t, "two", tok)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, err = f.Token()
	assert.Error(t, err, "empty")
}
