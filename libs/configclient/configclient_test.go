package configclient

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fnrunner/fnrunner/libs/executortable"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestAwait(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	if got := c.Await(context.Background(), 10*time.Millisecond); got != nil {
		t.Fatalf("Await before any table = %v, want nil", got)
	}
	want := executortable.Build(&configpb.Snapshot{Version: 1})
	go func() {
		// The first snapshot arrives while a call waits.
		c.tables.Store(want)
		c.readyOnce.Do(func() { close(c.ready) })
	}()
	if got := c.Await(context.Background(), time.Minute); got != want {
		t.Errorf("Await = %v, want the first table", got)
	}
}
