package monitoring_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// The values the test gives the dashboard's variables: set-namespace's
// function label (the executor table's name for set-namespace:v0.4.5) and
// the go executor, which runs it in the stack.
const (
	testFunction = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"
	testExecutor = "go"
)

// monitoringConfigs claim two more images for the binary executor: one
// that runs the set-namespace binary, and one whose binary the
// binary-runner has not (it answers NotFound, which the gateway counts).
const monitoringConfigs = `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: monitoring-binary
spec:
  image: sn-binary
  prefixes: [example.com/monitoring]
  binaryExecutor:
    tags: [v1]
    path: set-namespace
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: monitoring-missing
spec:
  image: missing
  prefixes: [example.com/monitoring]
  binaryExecutor:
    tags: [v1]
    path: no-such-binary
`

// badReplacements is a ResourceList whose function config has
// apply-replacements copy from a resource that is not there: the function
// fails (exits 1).
const badReplacements = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: ApplyReplacements
  metadata:
    name: replacements
  replacements:
  - source:
      kind: ConfigMap
      name: not-there
    targets:
    - select:
        kind: ConfigMap
      fieldPaths: [data.x]
`

// wantMetrics are the metric families the dashboard shows; each must be
// read by some panel.
var wantMetrics = []string{
	"fnrunner_evaluations_total", "fnrunner_evaluation_duration_seconds_bucket",
	"fnrunner_evaluation_input_bytes_total", "fnrunner_evaluation_output_bytes_total",
	"fnrunner_gateway_not_found_total",
	"fnrunner_admission_wait_seconds_bucket", "fnrunner_admission_in_flight_weight",
	"fnrunner_admission_capacity_weight", "fnrunner_admission_queued_calls",
	"fnrunner_function_pods", "fnrunner_pod_waiting_calls", "fnrunner_pod_cold_starts_total",
	"fnrunner_pod_time_to_ready_seconds_bucket", "fnrunner_pods_created_total",
	"fnrunner_pods_deleted_total", "fnrunner_pods_failed_total",
	"fnrunner_image_metadata_lookups_total", "fnrunner_registry_request_duration_seconds_bucket",
	"fnrunner_executor_table_version", "fnrunner_executor_table_last_update_timestamp_seconds",
	"fnrunner_config_subscribers",
	"fnrunner_sandbox_layer_available", "fnrunner_sandbox_layer_used",
	"fnrunner_grpc_server_handled_total", "fnrunner_grpc_server_handling_seconds_bucket",
}

func TestDashboardReadsEveryMetric(t *testing.T) {
	d, _ := readDashboard(t, monitoringDir(t))
	read := map[string]bool{}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			for _, m := range metricNames(tg.Expr) {
				read[m] = true
			}
		}
	}
	for _, m := range wantMetrics {
		assert.True(t, read[m], "no panel reads %s", m)
	}
}

// substituteFunctions replaces the dashboard's variables in a panel's
// expression as Grafana does, with the test's values and functions as
// $function's: several go into =~ as Grafana puts them, (a|b), each
// regex-escaped.
func substituteFunctions(t testing.TB, expr string, functions []string) string {
	t.Helper()
	quote := func(v string) string { return strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`) }
	var quoted []string
	for _, f := range functions {
		quoted = append(quoted, quote(f))
	}
	function := quoted[0]
	if len(quoted) > 1 {
		function = "(" + strings.Join(quoted, "|") + ")"
	}
	return expand(t, expr, variables{rateInterval: "1m", interval: "15s", function: function, executor: quote(testExecutor)})
}

// variables are the values Grafana gives the dashboard's variables: the
// function and executor as they go into =~ (a regex-escaped single value,
// or the All value ".*").
type variables struct {
	rateInterval, interval, function, executor string
}

// expand replaces the dashboard's variables in expr with vars.
func expand(t testing.TB, expr string, vars variables) string {
	t.Helper()
	out := strings.NewReplacer(
		"${__rate_interval}", vars.rateInterval, "$__rate_interval", vars.rateInterval,
		"${__interval}", vars.interval, "$__interval", vars.interval,
		"${function}", vars.function, "$function", vars.function,
		"${executor}", vars.executor, "$executor", vars.executor,
	).Replace(expr)
	require.NotContains(t, out, "$", "a dashboard variable with no value, in %s", expr)
	return out
}

// call is a kind of call the load sends, n times.
type call struct {
	what, image, input string
	want               codes.Code
	n                  int
}

// sendLoad sends the calls, a few at a time, and returns how many it sent
// by code.
func sendLoad(t *testing.T, s *stack.Stack, calls []call) map[string]int {
	t.Helper()
	sent := map[string]int{}
	for _, c := range calls {
		var (
			mu   sync.Mutex
			got  = map[codes.Code]int{}
			errs []string
			wg   sync.WaitGroup
		)
		next := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: c.image, ResourceList: []byte(c.input)})
					cancel()
					mu.Lock()
					got[status.Code(err)]++
					if status.Code(err) != c.want && len(errs) < 3 {
						errs = append(errs, fmt.Sprint(err))
					}
					mu.Unlock()
				}
			}()
		}
		for range c.n {
			next <- struct{}{}
		}
		close(next)
		wg.Wait()
		assert.Equal(t, map[codes.Code]int{c.want: c.n}, got, "%s (%s): codes; errors: %v", c.what, c.image, errs)
		for code, n := range got {
			sent[code.String()] += n
		}
	}
	return sent
}

// loadRounds is how many rounds of calls the test sends.
const loadRounds = 3

// waitScraped waits until Prometheus scrapes all targets (job → address), has evaluated
// every rule, and has scraped the gateway after it answered calls calls
// (0: none yet); then for one more scrape of every target.
func waitScraped(t testing.TB, prom *prometheusServer, s *stack.Stack, targets map[string]string, calls int) {
	t.Helper()
	var last string
	harness.WaitFor(t, "prometheus to scrape every target", func() bool {
		ts, err := prom.targets()
		if err != nil || len(ts) != len(targets) {
			last = fmt.Sprintf("targets: %v (%v)", ts, err)
			return false
		}
		for _, tg := range ts {
			if tg.Health != "up" {
				last = fmt.Sprintf("target %s is %s: %s; its /metrics says: %.500s", tg.Job, tg.Health, tg.LastError, get("http://"+targets[tg.Job]+"/metrics"))
				return false
			}
		}
		if calls > 0 {
			got, err := prom.scalar(`sum(fnrunner_evaluations_total{job="gateway"})`)
			if err != nil || got != float64(calls) {
				last = fmt.Sprintf("gateway calls scraped: %v of %d (%v)", got, calls, err)
				return false
			}
		}
		rs, err := prom.rules()
		if err != nil || len(rs) == 0 {
			last = fmt.Sprintf("rules: %v", err)
			return false
		}
		for _, r := range rs {
			if r.Health == "unknown" {
				last = "rule " + r.Name + " not evaluated yet"
				return false
			}
		}
		return true
	}, func() string { return last + "\n" + prom.out.String() + s.Logs() })
	time.Sleep(1500 * time.Millisecond)
}

// get returns the body of a GET of url, or the error.
func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s: %s", resp.Status, body)
}

// The dashboard and the alerts on the real services' metrics: a real
// Prometheus scrapes the gateway, the binary-runner, the config-reconciler
// and the pod-manager on loopback (the pod-manager against a real
// apiserver, its pods run by the test kubelet, see startPodSide) while
// they serve calls with varied outcomes; then every panel's expression
// (the test's values for the variables) and every alert's expression
// without its threshold must name only metrics that exist, evaluate
// without error, and return at least one number.
func TestDashboardAndAlertsOnRealMetrics(t *testing.T) {
	dir := monitoringDir(t)
	prometheusBinary(t, "prometheus") // fail before starting anything
	rules, spec := readRules(t, dir)
	d, _ := readDashboard(t, dir)

	targets := map[string]string{}
	for _, job := range []string{"gateway", "binary-runner", "config-reconciler", "pod-manager"} {
		address, err := localstack.FreeAddress()
		require.NoError(t, err)
		targets[job] = address
	}
	pods := startPodSide(t)
	s := stack.Start(t, stack.Options{
		Configs:              map[string]string{"monitoring.yaml": monitoringConfigs, "pods.yaml": pods.configs},
		GatewayArgs:          []string{"--metrics-address=" + targets["gateway"]},
		BinaryRunnerArgs:     []string{"--metrics-address=" + targets["binary-runner"]},
		ConfigReconcilerArgs: []string{"--metrics-address=" + targets["config-reconciler"]},
		PodManagerArgs:       append(pods.args, "--metrics-address="+targets["pod-manager"]),
	})
	prom := startPrometheus(t, targets, writeRulesFile(t, spec, t.TempDir()))

	// Rounds of load, each scraped before the next: counters exist from
	// the first round and grow in the next ones, so that rates have data.
	waitScraped(t, prom, s, targets, 0)
	sent := map[string]int{}
	total := 0
	for range loadRounds {
		for code, n := range pods.drive(t, s) {
			sent[code] += n
			total += n
		}
		for code, n := range sendLoad(t, s, []call{
			{what: "the go executor", image: "set-namespace:v0.4.5", input: stack.Input, want: codes.OK, n: 100},
			{what: "the binary executor", image: "example.com/monitoring/sn-binary:v1", input: stack.Input, want: codes.OK, n: 15},
			{what: "an image no one claims", image: "example.com/monitoring/unknown:v1", input: stack.Input, want: codes.NotFound, n: 7},
			{what: "a claimed binary the binary-runner has not", image: "example.com/monitoring/missing:v1", input: stack.Input, want: codes.NotFound, n: 7},
			{what: "a function failing on its config", image: "apply-replacements:v0.1.5", input: badReplacements, want: codes.Internal, n: 7},
			{what: "input that is not a ResourceList", image: "set-namespace:v0.4.5", input: "this: [is not a ResourceList", want: codes.InvalidArgument, n: 7},
		}) {
			sent[code] += n
			total += n
		}
		waitScraped(t, prom, s, targets, total)
	}
	at := time.Now()

	rs, err := prom.rules()
	require.NoError(t, err)
	for _, r := range rs {
		assert.Equal(t, "ok", r.Health, "rule %s: %s", r.Name, r.LastError)
	}

	// The gateway counted the calls by the codes they got.
	byCode, err := prom.query(`sum by (code) (fnrunner_evaluations_total{job="gateway"})`, at)
	require.NoError(t, err)
	scraped := map[string]int{}
	for _, smp := range byCode {
		scraped[smp.Metric["code"]] = int(smp.Value)
	}
	assert.Equal(t, sent, scraped, "the gateway's calls by code")

	// The variables' values are among those their queries offer.
	functions, err := prom.labelValues("function", "fnrunner_evaluations_total")
	require.NoError(t, err)
	assert.Contains(t, functions, testFunction, "label_values(fnrunner_evaluations_total, function)")
	executors, err := prom.labelValues("executor", "fnrunner_evaluations_total")
	require.NoError(t, err)
	assert.Contains(t, executors, testExecutor, "label_values(fnrunner_evaluations_total, executor)")

	names, err := prom.labelValues("__name__")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	type check struct{ what, expr string }
	var checks []check
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			// The variable $function with several values, as Grafana
			// gives a multi-value one: the go executor's function, and
			// the pod executor's.
			checks = append(checks, check{fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID), substituteFunctions(t, tg.Expr, append([]string{testFunction}, pods.functions...))})
		}
	}
	for _, a := range rules.alerts() {
		lhs, _, _, err := stripThreshold(a.Expr)
		require.NoError(t, err, a.Alert)
		checks = append(checks, check{"alert " + a.Alert, lhs})
	}
	for _, c := range checks {
		for _, m := range metricNames(c.expr) {
			assert.True(t, known[m], "%s: unknown metric %s", c.what, m)
		}
		res, err := prom.query(c.expr, at)
		if !assert.NoError(t, err, "%s: %s", c.what, c.expr) {
			continue
		}
		if !assert.NotEmpty(t, res, "%s: empty result of %s", c.what, c.expr) {
			continue
		}
		finite := false
		for _, smp := range res {
			finite = finite || !math.IsNaN(smp.Value) && !math.IsInf(smp.Value, 0)
		}
		assert.True(t, finite, "%s: no number in the result of %s: %v", c.what, c.expr, res)
		t.Logf("%s: %d series, e.g. %v", c.what, len(res), res[0])
	}
}
