package configclient

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/executortable"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestAwait(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	require.Nil(t, c.Await(context.Background(), 10*time.Millisecond), "Await before any table")
	want := executortable.Build(&configpb.Snapshot{Version: 1})
	go func() {
		// The first snapshot arrives while a call waits.
		c.store(want)
		c.readyOnce.Do(func() { close(c.ready) })
	}()
	assert.Same(t, want, c.Await(context.Background(), time.Minute), "Await returns the first table")
}

// A call the gateway routed by a snapshot this client has not seen yet
// waits for it (the gateway saw a FunctionConfig a moment before); one
// routed by an older snapshot, or by one of another epoch, does not; and a
// snapshot that never comes holds a call for a bounded time only.
func TestAwaitWaitsForTheGatewaysSnapshot(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	v3 := executortable.Build(&configpb.Snapshot{Epoch: "e", Version: 3})
	c.store(v3)
	routed := func(s string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(executortable.SnapshotHeader, s))
	}
	assert.Same(t, v3, c.Await(routed("2@e"), time.Minute), "an older snapshot")
	assert.Same(t, v3, c.Await(routed("9@other"), time.Minute), "another epoch's")
	assert.Same(t, v3, c.Await(routed("not a snapshot"), time.Minute), "a header that names none")

	v4 := executortable.Build(&configpb.Snapshot{Epoch: "e", Version: 4})
	v5 := executortable.Build(&configpb.Snapshot{Epoch: "e", Version: 5})
	got := make(chan *executortable.Tables)
	go func() { got <- c.Await(routed("5@e"), time.Minute) }()
	c.store(v4)
	select {
	case tb := <-got:
		t.Fatalf("a call routed by snapshot 5 went on with %d", tb.Version)
	case <-time.After(50 * time.Millisecond):
	}
	c.store(v5)
	assert.Same(t, v5, <-got, "the gateway's snapshot")

	ctx, cancel := context.WithCancel(routed("6@e"))
	cancel()
	assert.Same(t, v5, c.Await(ctx, time.Minute), "a call that ends waiting goes on with the newest table")
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

func TestTableMetrics(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Collectors()...)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fnrunner_executor_table_version Version of the executor table in use (0: none yet).
# TYPE fnrunner_executor_table_version gauge
fnrunner_executor_table_version 0
# HELP fnrunner_executor_table_last_update_timestamp_seconds When the executor table in use arrived, in Unix seconds (0: none yet); its age is time() minus this.
# TYPE fnrunner_executor_table_last_update_timestamp_seconds gauge
fnrunner_executor_table_last_update_timestamp_seconds 0
`)), "before the first table")

	before := float64(time.Now().UnixNano()) / 1e9
	c.store(executortable.Build(&configpb.Snapshot{Version: 7}))
	got := gauges(t, reg)
	assert.Equal(t, 7.0, got["fnrunner_executor_table_version"])
	assert.GreaterOrEqual(t, got["fnrunner_executor_table_last_update_timestamp_seconds"], before)
	assert.InDelta(t, before, got["fnrunner_executor_table_last_update_timestamp_seconds"], 5)
}

var _ evalmetrics.Namer = (*Client)(nil)

func TestFunctionName(t *testing.T) {
	c := New(slog.New(slog.DiscardHandler), nil, "test")
	_, ok := c.FunctionName("fn:v1")
	assert.False(t, ok, "named before any table")
	c.store(executortable.Build(&configpb.Snapshot{DefaultImagePrefix: "example.com", Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "fn", Image: "fn", Go: &configpb.GoExecutor{Tags: []string{"v1"}},
	}}}))
	got, ok := c.FunctionName("fn:v1")
	assert.True(t, ok)
	assert.Equal(t, "example.com/fn:v1", got)
	_, ok = c.FunctionName("fn:v2")
	assert.False(t, ok, "a tag the table does not claim")
}

// gauges are the values of the unlabelled gauges reg gathers, by name.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}
