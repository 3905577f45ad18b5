package configclient

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/executortable"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestAwait(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	require.Nil(t, c.Await(context.Background(), 10*time.Millisecond), "Await before any table")
	want := executortable.Build(&configpb.Snapshot{Version: 1})
	go func() {
		// The first snapshot arrives while a call waits.
		c.tables.Store(want)
		c.readyOnce.Do(func() { close(c.ready) })
	}()
	assert.Same(t, want, c.Await(context.Background(), time.Minute), "Await returns the first table")
}
