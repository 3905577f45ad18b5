package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// labels is a pod cache that records the label of each function it is
// asked for, and has no pod.
type labels struct{ got []string }

var _ Cache = (*labels)(nil)

func (l *labels) Acquire(_ context.Context, f podcache.Function) (*podcache.Lease, error) {
	l.got = append(l.got, f.Label)
	return nil, errors.New("no pods here")
}

func (*labels) PodFailed(string, error) {}

// tableNames names images as the table does (configclient.Client's
// FunctionName over a fixed table).
type tableNames struct{ t *executortable.Tables }

var _ evalmetrics.Namer = tableNames{}

func (n tableNames) FunctionName(image string) (string, bool) { return n.t.FunctionNameOf(image) }

// The pods' metrics get the table's name for the function, "" (other) for
// an image no FunctionConfig names; the call's metrics are the pod
// executor's, under the same name.
func TestFunctionLabels(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	reg.Push(t, prefix+"/claimed:v1", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Push(t, prefix+"/claimed:v2", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Push(t, prefix+"/unclaimed:v1", v1.Config{Entrypoint: []string{"/fn"}})
	resolver, err := imagemeta.New(imagemeta.Options{DockerConfigPath: reg.DockerConfig(t, testregistry.User, testregistry.Password),
		CAPaths: []string{reg.CAFile}, AllowedRegistries: []string{reg.Host}})
	require.NoError(t, err)
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "claimed", Image: "claimed", Pod: &configpb.PodExecutor{Tags: []string{"v1", "~2"}},
	}}})
	tpl := &templates.Templates{Pod: templates.DefaultPodTemplate("ns", "wrapper"), Service: templates.DefaultServiceTemplate("ns")}
	cache := &labels{}
	s := New(fixedTables{tables}, resolver, cache, func() *templates.Templates { return tpl }, NewConns(1<<20),
		Options{MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, TTL: time.Minute, RunUnclaimed: true, OverrideServiceAccounts: []string{"*"}})
	metrics := prometheus.NewPedanticRegistry()
	m, err := evalmetrics.New(metrics, tableNames{tables})
	require.NoError(t, err)
	e := &evalmetrics.Evaluator{Next: s, Metrics: m, Executor: "pod"}

	for _, tc := range []struct{ image, label string }{
		{image: "claimed:v1", label: prefix + "/claimed:v1"},
		{image: prefix + "/claimed:v1", label: prefix + "/claimed:v1"},
		{image: "claimed:v2", label: prefix + "/claimed"},
		{image: "unclaimed:v1", label: ""},
	} {
		cache.got = nil
		_, err := e.EvaluateFunction(context.Background(), &evalwire.Request{Image: tc.image})
		require.Error(t, err)
		assert.Equal(t, []string{tc.label}, cache.got, "label of %s", tc.image)
	}
	require.NoError(t, testutil.GatherAndCompare(metrics, strings.NewReader(fmt.Sprintf(`
# HELP fnrunner_evaluations_total EvaluateFunction calls answered, by executor, function (the executor table's name for the image, else other) and gRPC code.
# TYPE fnrunner_evaluations_total counter
fnrunner_evaluations_total{code="Unavailable",executor="pod",function="%[1]s/claimed"} 1
fnrunner_evaluations_total{code="Unavailable",executor="pod",function="%[1]s/claimed:v1"} 2
fnrunner_evaluations_total{code="Unavailable",executor="pod",function="other"} 1
`, prefix)), "fnrunner_evaluations_total"))
}
