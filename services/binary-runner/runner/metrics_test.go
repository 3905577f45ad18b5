package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
)

// tableNames names images as the table does (configclient.Client's
// FunctionName over a fixed table).
type tableNames struct{ t *executortable.Tables }

var _ evalmetrics.Namer = tableNames{}

func (n tableNames) FunctionName(image string) (string, bool) { return n.t.FunctionNameOf(image) }

// The executor label is the executor that ran the call (go or binary), the
// one the gateway chose when the call fails before, and none otherwise: a
// header naming another executor is not a label.
func TestEvaluationMetricsNameTheExecutor(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin"), []byte("#!/bin/sh\ncat\n"), 0o755))
	r := newRunner(map[string]catalog.Function{"fn": {Process: func(*fn.ResourceList) (bool, error) { return true, nil }}},
		goEntry("fn", "fn"), binaryEntry("bin", "bin"))
	r.opts.FunctionsDir = dir
	tables := r.tables.(fixedTables).t

	tests := []struct {
		name, image, header string
		executor, function  string
		code                string
	}{
		{name: "go, as the gateway chose", image: "fn:v1", header: "go", executor: "go", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: "OK"},
		{name: "go, no header", image: "fn:v1", executor: "go", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: "OK"},
		{name: "binary, no header", image: "bin:v1", executor: "binary", function: "ghcr.io/kptdev/krm-functions-catalog/bin:v1", code: "OK"},
		{name: "binary the gateway chose but not claimed", image: "fn:v1", header: "binary", executor: "binary", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: "NotFound"},
		{name: "the chosen executor's, failing early", image: "Bad Image", header: "go", executor: "go", function: evalmetrics.Other, code: "InvalidArgument"},
		{name: "nothing runs it, no header", image: "other:v1", executor: evalmetrics.None, function: evalmetrics.Other, code: "NotFound"},
		{name: "a header naming another executor", image: "fn:v1", header: "pod", executor: evalmetrics.None, function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: "NotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := evalmetrics.New(reg, tableNames{tables})
			require.NoError(t, err)
			e := &evalmetrics.Evaluator{Next: r, Metrics: m, Executor: evalmetrics.None}
			ctx := context.Background()
			if tt.header != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(executortable.Header, tt.header))
			}
			_, err = e.EvaluateFunction(ctx, &evalwire.Request{Image: tt.image, ResourceList: evalwire.Bytes([]byte(rl))})
			assert.Equal(t, tt.code, status.Code(err).String(), "%v", err)
			want := fmt.Sprintf(`
# HELP fnrunner_evaluations_total EvaluateFunction calls answered, by executor, function (the executor table's name for the image, else other) and gRPC code.
# TYPE fnrunner_evaluations_total counter
fnrunner_evaluations_total{code=%q,executor=%q,function=%q} 1
`, tt.code, tt.executor, tt.function)
			assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "fnrunner_evaluations_total"))
			n, err := testutil.GatherAndCount(reg, "fnrunner_evaluation_input_bytes_total")
			require.NoError(t, err)
			assert.Equal(t, 1, n)
		})
	}
}
