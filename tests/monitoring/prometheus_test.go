package monitoring_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// prometheusServer is a Prometheus process scraping the test's targets
// every second.
type prometheusServer struct {
	base string
	out  *localstack.LogBuffer
}

// startPrometheus runs Prometheus with one scrape job per target (job →
// host:port) and the rule file rules, and waits until it is ready. It is
// stopped when the test ends.
func startPrometheus(t testing.TB, targets map[string]string, rules string) *prometheusServer {
	t.Helper()
	bin := prometheusBinary(t, "prometheus")
	dir := t.TempDir()
	var jobs []map[string]any
	for job, target := range targets {
		jobs = append(jobs, map[string]any{
			"job_name":       job,
			"static_configs": []map[string]any{{"targets": []string{target}}},
		})
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i]["job_name"].(string) < jobs[j]["job_name"].(string) })
	cfg, err := yaml.Marshal(map[string]any{
		"global": map[string]any{
			"scrape_interval":     "1s",
			"scrape_timeout":      "1s",
			"evaluation_interval": "1s",
		},
		"rule_files":     []string{rules},
		"scrape_configs": jobs,
	})
	require.NoError(t, err)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgFile, cfg, 0o644))
	address, err := localstack.FreeAddress()
	require.NoError(t, err)
	out := &localstack.LogBuffer{}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+address, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("prometheus did not stop within 30s of SIGTERM\n%s", out)
		}
	})
	p := &prometheusServer{base: "http://" + address, out: out}
	harness.WaitFor(t, "prometheus to be ready", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("prometheus exited: %v\n%s", err, out)
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, out.String)
	return p
}

// apiResponse is the envelope of Prometheus' HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
	Warnings  []string        `json:"warnings"`
}

// get calls an API path with the query parameters and returns its data.
func (p *prometheusServer) get(path string, params url.Values) (json.RawMessage, error) {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	if len(r.Warnings) > 0 {
		return nil, fmt.Errorf("%s: warnings: %v", path, r.Warnings)
	}
	return r.Data, nil
}

// sample is one element of an instant query's result.
type sample struct {
	Metric map[string]string
	Value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v %g", s.Metric, s.Value) }

// query evaluates expr at time at (an instant query); an error is
// Prometheus' (a parse error, an unknown function, ...).
func (p *prometheusServer) query(expr string, at time.Time) ([]sample, error) {
	data, err := p.get("/api/v1/query", url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}})
	if err != nil {
		return nil, err
	}
	var r struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	switch r.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Result, &v); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(v))
		for _, e := range v {
			f, err := parseValue(e.Value[1])
			if err != nil {
				return nil, err
			}
			out = append(out, sample{Metric: e.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Result, &v); err != nil {
			return nil, err
		}
		f, err := parseValue(v[1])
		if err != nil {
			return nil, err
		}
		return []sample{{Value: f}}, nil
	}
	return nil, fmt.Errorf("result of type %s", r.ResultType)
}

// rangeSeries is one series of a range query's result: its values at the
// query's steps, those where it has none left out (a value may be NaN: 0/0).
type rangeSeries struct {
	Metric map[string]string
	Times  []time.Time
	Values []float64
}

// queryRange evaluates expr at every step from start to end (a range
// query, as Grafana's time-series panels make).
func (p *prometheusServer) queryRange(expr string, start, end time.Time, step time.Duration) ([]rangeSeries, error) {
	unix := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	data, err := p.get("/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}})
	if err != nil {
		return nil, err
	}
	var r struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.ResultType != "matrix" {
		return nil, fmt.Errorf("result of type %s", r.ResultType)
	}
	out := make([]rangeSeries, 0, len(r.Result))
	for _, e := range r.Result {
		s := rangeSeries{Metric: e.Metric}
		for _, v := range e.Values {
			at, ok := v[0].(float64)
			if !ok {
				return nil, fmt.Errorf("timestamp %v is not a number", v[0])
			}
			f, err := parseValue(v[1])
			if err != nil {
				return nil, err
			}
			s.Times = append(s.Times, time.UnixMilli(int64(math.Round(at*1000))))
			s.Values = append(s.Values, f)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("value %v is not a string", v)
	}
	return strconv.ParseFloat(s, 64)
}

// scalar is the value of a query whose result is one sample.
func (p *prometheusServer) scalar(expr string) (float64, error) {
	s, err := p.query(expr, time.Now())
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return math.NaN(), fmt.Errorf("%s: %d samples", expr, len(s))
	}
	return s[0].Value, nil
}

// labelValues are the values of a label, in the series that match match.
func (p *prometheusServer) labelValues(label string, match ...string) ([]string, error) {
	data, err := p.get("/api/v1/label/"+label+"/values", url.Values{"match[]": match})
	if err != nil {
		return nil, err
	}
	var v []string
	return v, json.Unmarshal(data, &v)
}

// ruleHealth is each loaded rule's health and last error.
type ruleHealth struct {
	Name, Health, LastError string
}

func (p *prometheusServer) rules() ([]ruleHealth, error) {
	data, err := p.get("/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Groups []struct {
			Rules []ruleHealth `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	var out []ruleHealth
	for _, g := range r.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// target is a scrape target's state.
type target struct {
	Job, Health, LastError string
}

// targets are the active scrape targets.
func (p *prometheusServer) targets() ([]target, error) {
	data, err := p.get("/api/v1/targets", url.Values{"state": {"active"}})
	if err != nil {
		return nil, err
	}
	var r struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	var out []target
	for _, a := range r.ActiveTargets {
		out = append(out, target{Job: a.Labels["job"], Health: a.Health, LastError: a.LastError})
	}
	return out, nil
}
