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

func TestCurrentSignalsNewTables(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	first, changed := c.Current()
	require.Nil(t, first, "a table before any snapshot")
	want := executortable.Build(&configpb.Snapshot{Version: 1})
	c.store(want)
	select {
	case <-changed:
	default:
		t.Fatal("the channel Current returned was not closed by a new table")
	}
	got, next := c.Current()
	assert.Same(t, want, got)
	select {
	case <-next:
		t.Fatal("the new channel is closed without a newer table")
	default:
	}
}
