package monitoring_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

// object is the part of a rendered manifest the tests read.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		// A Service's.
		Ports []struct {
			Name string `json:"name"`
		} `json:"ports"`
		// A ServiceMonitor's.
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []endpoint `json:"endpoints"`
		// A PodMonitor's.
		PodMetricsEndpoints []endpoint `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// endpoint is a ServiceMonitor's or PodMonitor's endpoint.
type endpoint struct {
	Port        string `json:"port"`
	Relabelings []struct {
		Action       string   `json:"action"`
		SourceLabels []string `json:"sourceLabels"`
		Regex        string   `json:"regex"`
		TargetLabel  string   `json:"targetLabel"`
		Replacement  string   `json:"replacement"`
	} `json:"relabelings"`
}

// job is the job label an endpoint's relabelings give its targets.
func (e endpoint) job() string {
	for _, r := range e.Relabelings {
		if r.Action == "replace" && r.TargetLabel == "job" {
			return r.Replacement
		}
	}
	return ""
}

// render builds a kustomization directory.
func render(t *testing.T, dir string) []object {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	// Runfiles are symlinks into the source tree.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize %s", dir)
	var out []object
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		var o object
		require.NoError(t, json.Unmarshal(data, &o))
		out = append(out, o)
	}
	return out
}

// jobs are the job labels the ServiceMonitors give the four services'
// targets, as the loopback test names its scrape jobs.
var jobs = []string{"gateway", "binary-runner", "config-reconciler", "pod-manager"}

// The overlay renders to monitoring objects only; each ServiceMonitor
// selects one of deploy/services' Services, scrapes its metrics port and
// names the job as the alerts and the dashboard expect; the dashboard
// ConfigMap is dashboard.json, labelled for Grafana's sidecar.
func TestManifests(t *testing.T) {
	dir := monitoringDir(t)
	objs := render(t, dir)
	services := map[string]object{}
	for _, o := range render(t, filepath.Join(dir, "..", "..", "services")) {
		if o.Kind == "Service" {
			services[o.Metadata.Name] = o
		}
	}
	require.Len(t, services, 4, "deploy/services' Services")

	kinds := map[string]int{}
	monitored := map[string]string{} // Service → job
	_, dashboardJSON := readDashboard(t, dir)
	for _, o := range objs {
		kinds[o.Kind]++
		assert.Equal(t, "porch-fn-system", o.Metadata.Namespace, "%s %s", o.Kind, o.Metadata.Name)
		assert.Equal(t, "fnrunner", o.Metadata.Labels["app.kubernetes.io/part-of"], "%s %s", o.Kind, o.Metadata.Name)
		switch o.Kind {
		case "ServiceMonitor":
			require.Len(t, o.Spec.Endpoints, 1, o.Metadata.Name)
			ep := o.Spec.Endpoints[0]
			assert.Equal(t, "metrics", ep.Port, o.Metadata.Name)
			var service string
			for _, r := range ep.Relabelings {
				if r.Action == "keep" && len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_kubernetes_service_name" {
					service = r.Regex
				}
			}
			job := ep.job()
			s, ok := services[service]
			if !assert.True(t, ok, "ServiceMonitor %s keeps Service %q, which deploy/services has not", o.Metadata.Name, service) {
				continue
			}
			assert.Equal(t, service, o.Metadata.Name, "a ServiceMonitor is named as its Service")
			for k, v := range o.Spec.Selector.MatchLabels {
				assert.Equal(t, v, s.Metadata.Labels[k], "ServiceMonitor %s selects %s=%s, which Service %s has not", o.Metadata.Name, k, v, service)
			}
			hasPort := false
			for _, p := range s.Spec.Ports {
				hasPort = hasPort || p.Name == "metrics"
			}
			assert.True(t, hasPort, "Service %s has no port named metrics", service)
			assert.Equal(t, strings.TrimPrefix(service, "fnrunner-"), job, "ServiceMonitor %s: job", o.Metadata.Name)
			monitored[service] = job
		case "PodMonitor":
			// The function pods, as the pod-manager labels them, on
			// the metrics port of its built-in pod template (which
			// deploy/base ships, tests/deploy checks).
			assert.Equal(t, map[string]string{kube.LabelManagedBy: kube.ManagedBy}, o.Spec.Selector.MatchLabels, o.Metadata.Name)
			require.Len(t, o.Spec.PodMetricsEndpoints, 1, o.Metadata.Name)
			ep := o.Spec.PodMetricsEndpoints[0]
			var ports []string
			for _, c := range templates.DefaultPodTemplate("porch-fn-system", "wrapper").Template.Spec.Containers {
				for _, p := range c.Ports {
					ports = append(ports, p.Name)
				}
			}
			assert.Contains(t, ports, ep.Port, "PodMonitor %s scrapes a port the pod template has not", o.Metadata.Name)
			assert.Equal(t, "wrapper-server", ep.job(), "PodMonitor %s: job", o.Metadata.Name)
		case "ConfigMap":
			assert.Equal(t, "fnrunner-grafana-dashboard", o.Metadata.Name)
			assert.Equal(t, "1", o.Metadata.Labels["grafana_dashboard"], "the label Grafana's dashboard sidecar looks for")
			assert.JSONEq(t, string(dashboardJSON), o.Data["fnrunner.json"], "the ConfigMap holds dashboard.json")
		}
	}
	assert.Equal(t, map[string]int{"ServiceMonitor": 4, "PodMonitor": 1, "PrometheusRule": 1, "ConfigMap": 1}, kinds, "only monitoring objects")
	for name := range services {
		assert.Contains(t, monitored, name, "Service %s has no ServiceMonitor", name)
	}
	var monitoredJobs []string
	for _, j := range monitored {
		monitoredJobs = append(monitoredJobs, j)
	}
	assert.ElementsMatch(t, jobs, monitoredJobs)

	// Every job an expression names is one of those.
	rules, _ := readRules(t, dir)
	d, _ := readDashboard(t, dir)
	var exprs []string
	for _, a := range rules.alerts() {
		exprs = append(exprs, a.Expr)
	}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	jobMatcher := regexp.MustCompile(`\bjob\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
	for _, e := range exprs {
		for _, m := range jobMatcher.FindAllStringSubmatch(e, -1) {
			for _, j := range strings.Split(m[1], "|") {
				assert.Contains(t, jobs, j, "job %q in %s", j, e)
			}
		}
	}
}

// The dashboard has the variables the panels use, and every panel queries
// the dashboard's Prometheus data source.
func TestDashboard(t *testing.T) {
	d, _ := readDashboard(t, monitoringDir(t))
	assert.NotEmpty(t, d.UID)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Definition
	}
	assert.Equal(t, "label_values(fnrunner_evaluations_total, function)", vars["function"])
	assert.Equal(t, "label_values(fnrunner_evaluations_total, executor)", vars["executor"])
	assert.Contains(t, vars, "datasource")
	ids := map[int]bool{}
	panels := d.allPanels()
	assert.GreaterOrEqual(t, len(panels), 20)
	for _, p := range panels {
		assert.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if assert.NotNil(t, p.Datasource, p.Title) {
			assert.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		}
		if assert.NotEmpty(t, p.Targets, p.Title) {
			for _, tg := range p.Targets {
				assert.NotEmpty(t, tg.Expr, "%s %s", p.Title, tg.RefID)
			}
		}
	}
}
