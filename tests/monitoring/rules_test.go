package monitoring_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// ruleTests is the part of a promtool unit test file the test reads.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// The PrometheusRule's spec is a valid rule file (promtool check rules),
// every alert is as the overlay's conventions want it, and the unit tests
// in tests/ pass (promtool test rules), with a case where each alert fires
// and one where it does not.
func TestRules(t *testing.T) {
	promtool := prometheusBinary(t, "promtool")
	dir := monitoringDir(t)
	rules, spec := readRules(t, dir)
	work := t.TempDir()
	file := writeRulesFile(t, spec, work)

	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	t.Logf("promtool check rules:\n%s", out)
	require.NoError(t, err, "promtool check rules:\n%s", out)

	alerts := rules.alerts()
	require.NotEmpty(t, alerts)
	names := map[string]bool{}
	for _, a := range alerts {
		assert.False(t, names[a.Alert], "alert %s defined twice", a.Alert)
		names[a.Alert] = true
		assert.Regexp(t, `^Fnrunner[A-Z]\w+$`, a.Alert)
		assert.NotEmpty(t, a.For, "%s: fires at once, without for", a.Alert)
		assert.Contains(t, []string{"warning", "critical"}, a.Labels["severity"], "%s: severity", a.Alert)
		for _, k := range []string{"summary", "description", "runbook"} {
			assert.NotEmpty(t, a.Annotations[k], "%s: annotation %s", a.Alert, k)
		}
		_, _, _, err := stripThreshold(a.Expr)
		assert.NoError(t, err, "%s: its expression must end in its threshold", a.Alert)
	}
	for _, want := range []string{"FnrunnerHighErrorRatio", "FnrunnerHighLatencyP99", "FnrunnerColdStartsHigh", "FnrunnerExecutorTableStale", "FnrunnerPodsFailing"} {
		assert.True(t, names[want], "no alert %s", want)
	}

	// The unit tests, beside the rule file they name.
	testFiles, err := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, testFiles, "no promtool unit tests in %s/tests", dir)
	firing, quiet := map[string]int{}, map[string]int{}
	var args []string
	for _, f := range testFiles {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var rt ruleTests
		require.NoError(t, yaml.Unmarshal(data, &rt), f)
		assert.Equal(t, []string{rulesFile}, rt.RuleFiles, "%s: rule_files", f)
		for _, tc := range rt.Tests {
			for _, at := range tc.AlertRuleTests {
				assert.True(t, names[at.Alertname], "%s tests %s, which is no alert of prometheusrule.yaml", f, at.Alertname)
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname]++
				} else {
					quiet[at.Alertname]++
				}
			}
		}
		copied := filepath.Join(work, filepath.Base(f))
		require.NoError(t, os.WriteFile(copied, data, 0o644))
		args = append(args, copied)
	}
	for _, a := range alerts {
		assert.Positive(t, firing[a.Alert], "no unit test in which %s fires", a.Alert)
		assert.Positive(t, quiet[a.Alert], "no unit test in which %s does not fire", a.Alert)
	}

	cmd := exec.Command(promtool, append([]string{"test", "rules"}, args...)...)
	cmd.Dir = work
	out, err = cmd.CombinedOutput()
	t.Logf("promtool test rules:\n%s", out)
	require.NoError(t, err, "promtool test rules:\n%s", out)
	assert.Equal(t, len(args), strings.Count(string(out), "SUCCESS"), "every unit test file passes")
}
