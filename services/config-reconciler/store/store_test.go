package store

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// gauges are the values of the unlabelled gauges reg gathers, by name.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}

func TestTableMetrics(t *testing.T) {
	s := New("")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, map[string]float64{
		"fnrunner_executor_table_version":                       0,
		"fnrunner_executor_table_last_update_timestamp_seconds": 0,
		"fnrunner_config_subscribers":                           0,
	}, gauges(t, reg), "before the first table")

	before := float64(time.Now().UnixNano()) / 1e9
	require.True(t, s.Replace([]*configpb.FunctionConfig{{Namespace: "ns", Name: "a", Image: "a"}}))
	got := gauges(t, reg)
	assert.Equal(t, 1.0, got["fnrunner_executor_table_version"])
	published := got["fnrunner_executor_table_last_update_timestamp_seconds"]
	assert.GreaterOrEqual(t, published, before)
	assert.InDelta(t, before, published, 5)

	// The same content again is no new version: the time stays.
	require.False(t, s.Replace([]*configpb.FunctionConfig{{Namespace: "ns", Name: "a", Image: "a"}}))
	got = gauges(t, reg)
	assert.Equal(t, 1.0, got["fnrunner_executor_table_version"])
	assert.Equal(t, published, got["fnrunner_executor_table_last_update_timestamp_seconds"])

	require.True(t, s.Replace(nil))
	got = gauges(t, reg)
	assert.Equal(t, 2.0, got["fnrunner_executor_table_version"])
	assert.GreaterOrEqual(t, got["fnrunner_executor_table_last_update_timestamp_seconds"], published)
}

func TestSubscribersGauge(t *testing.T) {
	s := New("")
	subscribers := s.Collectors()[2]
	require.True(t, s.Replace(nil))
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan struct{}, 8)
	done := make(chan error, 3)
	for range 3 {
		go func() {
			done <- s.Watch(ctx, func(*configpb.Snapshot) error { sent <- struct{}{}; return nil })
		}()
	}
	for range 3 {
		<-sent
	}
	assert.Equal(t, 3.0, testutil.ToFloat64(subscribers), "three streams open")
	cancel()
	for range 3 {
		assert.ErrorIs(t, <-done, context.Canceled)
	}
	assert.Zero(t, testutil.ToFloat64(subscribers), "every stream closed")
}
