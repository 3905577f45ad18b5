package imagemeta

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// Each lookup is counted under one result, and each registry request's
// time under its outcome.
func TestLookupAndRegistryMetrics(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	r := resolver(t, reg, Options{TTL: time.Minute, NegativeTTL: time.Minute})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	lookups := func(result string) float64 { return testutil.ToFloat64(r.lookups.WithLabelValues(result)) }
	requests := func(outcome string) uint64 { return histogramCount(t, r.registry, outcome) }

	steps := []struct {
		name   string
		do     func() error
		result string
		// outcome of the registry request the lookup made, "" for none.
		outcome string
		wantErr bool
	}{
		{name: "first lookup asks the registry", do: func() error { _, err := r.Resolve(ctx, image); return err }, result: resultMiss, outcome: "ok"},
		{name: "then the cache answers", do: func() error { _, err := r.Resolve(ctx, image); return err }, result: resultHit},
		{name: "a missing image", do: func() error { _, err := r.Resolve(ctx, reg.Host+"/fns/missing:v1"); return err }, result: resultError, outcome: "error", wantErr: true},
		{name: "is remembered as missing", do: func() error { _, err := r.Resolve(ctx, reg.Host+"/fns/missing:v1"); return err }, result: resultNegative, wantErr: true},
		{name: "past the TTL with the registry gone: the expired entry", do: func() error {
			now = now.Add(2 * time.Minute)
			reg.Close()
			_, err := r.Resolve(ctx, image)
			return err
		}, result: resultStale, outcome: "error"},
		{name: "registry gone, nothing cached", do: func() error { _, err := r.Resolve(ctx, reg.Host+"/fns/other:v1"); return err }, result: resultError, outcome: "error", wantErr: true},
		{name: "listing tags is a registry request", do: func() error { _, err := r.Tags(ctx, reg.Host+"/fns/fn"); return err }, outcome: "error", wantErr: true},
	}
	for _, s := range steps {
		beforeLookups := map[string]float64{}
		for _, res := range []string{resultHit, resultNegative, resultMiss, resultStale, resultRefused, resultError} {
			beforeLookups[res] = lookups(res)
		}
		beforeOK, beforeErr := requests("ok"), requests("error")
		err := s.do()
		assert.Equal(t, s.wantErr, err != nil, "%s: %v", s.name, err)
		for res, before := range beforeLookups {
			want := before
			if res == s.result {
				want++
			}
			assert.Equal(t, want, lookups(res), "%s: lookups{result=%q}", s.name, res)
		}
		wantOK, wantErr := beforeOK, beforeErr
		switch s.outcome {
		case "ok":
			wantOK++
		case "error":
			wantErr++
		}
		assert.Equal(t, wantOK, requests("ok"), "%s: registry requests{outcome=ok}", s.name)
		assert.Equal(t, wantErr, requests("error"), "%s: registry requests{outcome=error}", s.name)
	}

	promReg := prometheus.NewPedanticRegistry()
	promReg.MustRegister(r.Collectors()...)
	require.NoError(t, testutil.GatherAndCompare(promReg, strings.NewReader(`
# HELP fnrunner_image_metadata_lookups_total Image metadata lookups by result: hit (fresh in the cache), negative (cached as not found or over a bound), miss (asked the registry), stale (the registry failed or too many lookups were in flight, an expired entry served), refused (too many lookups in flight, the registry not asked), error.
# TYPE fnrunner_image_metadata_lookups_total counter
fnrunner_image_metadata_lookups_total{result="error"} 2
fnrunner_image_metadata_lookups_total{result="hit"} 1
fnrunner_image_metadata_lookups_total{result="miss"} 1
fnrunner_image_metadata_lookups_total{result="negative"} 1
fnrunner_image_metadata_lookups_total{result="refused"} 0
fnrunner_image_metadata_lookups_total{result="stale"} 1
`), "fnrunner_image_metadata_lookups_total"))
	assert.Equal(t, 2, testutil.CollectAndCount(r.registry, "fnrunner_registry_request_duration_seconds"), "ok and error")
}

// histogramCount is the sample count of h's series with the given outcome.
func histogramCount(t *testing.T, h *prometheus.HistogramVec, outcome string) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
