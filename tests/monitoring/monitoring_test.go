// Tests of the monitoring overlay (deploy/overlays/monitoring): the
// alerts pass promtool's checks and unit tests (rules_test.go); the
// manifests render and select the services' metrics ports
// (manifests_test.go); and every dashboard panel's and alert's
// expression, evaluated by a real Prometheus scraping the real services
// on loopback under load, names metrics that exist and returns data
// (dashboard_test.go).
//
// Environment:
//
//	FNRUNNER_MONITORING_DIR   deploy/overlays/monitoring (a runfiles path, or
//	                          the path of a file in it)
//	FNRUNNER_PROMETHEUS       usr/bin/prometheus of Debian's prometheus
//	                          package unpacked (dpkg -x), usr/bin/promtool
//	                          beside it
//
// and, for the stack, the FNRUNNER_* binaries of tests/stack.
package monitoring_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
)

const (
	monitoringDirEnv = "FNRUNNER_MONITORING_DIR"
	prometheusEnv    = "FNRUNNER_PROMETHEUS"
	// rulesFile is the name the promtool unit tests (tests/*.yaml) give the
	// rule file: prometheusrule.yaml's spec, written beside them.
	rulesFile = "fnrunner.rules.yaml"
)

// monitoringDir is deploy/overlays/monitoring.
func monitoringDir(t testing.TB) string {
	t.Helper()
	p := os.Getenv(monitoringDirEnv)
	if p == "" {
		t.Fatalf("%s is not set: run this test with tools/bazel test, or under go test set it to the repository's deploy/overlays/monitoring", monitoringDirEnv)
	}
	p = harness.Runfile(t, p)
	fi, err := os.Stat(p)
	require.NoError(t, err, monitoringDirEnv)
	if !fi.IsDir() {
		p = filepath.Dir(p)
	}
	return p
}

// prometheusBinary is usr/bin/<name> (promtool, prometheus) of the
// unpacked Debian package: FNRUNNER_PROMETHEUS names its prometheus, and
// promtool is beside it.
func prometheusBinary(t testing.TB, name string) string {
	t.Helper()
	prom := os.Getenv(prometheusEnv)
	if prom == "" {
		t.Fatalf("%s is not set: it names usr/bin/prometheus of Debian's prometheus package unpacked "+
			"(apt-get download prometheus=2.42.0+ds-5+b6 && dpkg -x prometheus_*.deb ROOT; tools/bazel test sets it), with usr/bin/promtool beside it", prometheusEnv)
	}
	p := filepath.Join(filepath.Dir(harness.Runfile(t, prom)), name)
	_, err := os.Stat(p)
	require.NoError(t, err, "%s from %s", name, prometheusEnv)
	return p
}

// prometheusRule is the part of a PrometheusRule the tests read.
type prometheusRule struct {
	Kind string `json:"kind"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alerts are the PrometheusRule's alerting rules, in order.
func (p prometheusRule) alerts() []rule {
	var out []rule
	for _, g := range p.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// readRules reads prometheusrule.yaml: typed, and its spec as it is.
func readRules(t testing.TB, dir string) (prometheusRule, map[string]any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	require.NoError(t, err)
	var typed prometheusRule
	require.NoError(t, yaml.Unmarshal(data, &typed))
	require.Equal(t, "PrometheusRule", typed.Kind)
	var raw struct {
		Spec map[string]any `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(data, &raw))
	return typed, raw.Spec
}

// writeRulesFile writes the PrometheusRule's spec as a Prometheus rule
// file named rulesFile in dir and returns its path.
func writeRulesFile(t testing.TB, spec map[string]any, dir string) string {
	t.Helper()
	data, err := yaml.Marshal(spec)
	require.NoError(t, err)
	p := filepath.Join(dir, rulesFile)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			// Unit is Grafana's: reqps, s, Bps, percentunit, short, ...
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	// Panels are a collapsed row's.
	Panels []panel `json:"panels"`
}

// readDashboard reads dashboard.json.
func readDashboard(t testing.TB, dir string) (dashboard, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	return d, data
}

// allPanels are the dashboard's panels, those in collapsed rows included,
// without the rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}
