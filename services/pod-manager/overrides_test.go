package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// The flags that make the templateOverrides policy, and their defaults.
func TestOverridePolicyFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want templatemerge.Policy
		// fails: the flags are refused.
		fails bool
	}{
		{name: "defaults: no Secret or ConfigMap, 2 CPUs, 2Gi",
			want: templatemerge.Policy{MaxCPU: resource.MustParse("2"), MaxMemory: resource.MustParse("2Gi")}},
		{name: "named", args: []string{"--allowed-override-secrets=fn-creds, other", "--allowed-override-configmaps=fn-settings",
			"--max-override-cpu=500m", "--max-override-memory=512Mi"},
			want: templatemerge.Policy{AllowedSecrets: []string{"fn-creds", "other"}, AllowedConfigMaps: []string{"fn-settings"},
				MaxCPU: resource.MustParse("500m"), MaxMemory: resource.MustParse("512Mi")}},
		{name: "empty lists", args: []string{"--allowed-override-secrets=", "--allowed-override-configmaps="},
			want: templatemerge.Policy{MaxCPU: resource.MustParse("2"), MaxMemory: resource.MustParse("2Gi")}},
		{name: "not a quantity", args: []string{"--max-override-cpu=two"}, fails: true},
		{name: "negative", args: []string{"--max-override-memory=-1Gi"}, fails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--wrapper-server-image=wrapper"}, tt.args...), io.Discard)
			if tt.fails {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want.AllowedSecrets, o.overridePolicy.AllowedSecrets, "secrets")
			assert.Equal(t, tt.want.AllowedConfigMaps, o.overridePolicy.AllowedConfigMaps, "configmaps")
			assert.Zero(t, tt.want.MaxCPU.Cmp(o.overridePolicy.MaxCPU), "cpu %s", o.overridePolicy.MaxCPU.String())
			assert.Zero(t, tt.want.MaxMemory.Cmp(o.overridePolicy.MaxMemory), "memory %s", o.overridePolicy.MaxMemory.String())
		})
	}
}

// Porch's own FunctionConfigs, as an operator has them installed, all pass
// the pod-manager's default policy: its defaults refuse nothing porch ships.
func TestPorchFunctionConfigsPassTheDefaultPolicy(t *testing.T) {
	o, err := parseFlags([]string{"--wrapper-server-image=wrapper"}, io.Discard)
	require.NoError(t, err)
	n := 0
	for _, u := range porchfiles.Objects(t, "23-function-configurations.yaml") {
		if u.GetKind() != "FunctionConfig" {
			continue
		}
		n++
		var fc v1alpha1.FunctionConfig
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &fc), u.GetName())
		if fc.Spec.PodExecutor == nil {
			continue
		}
		assert.NoError(t, o.overridePolicy.Check(fc.Spec.PodExecutor.TemplateOverrides), "FunctionConfig %s", u.GetName())
		tpl := templates.DefaultPodTemplate("porch-fn-system", "wrapper")
		assert.NoError(t, o.overridePolicy.CheckMerged(&tpl.Template, fc.Spec.PodExecutor.TemplateOverrides), "FunctionConfig %s merged", u.GetName())
	}
	assert.Equal(t, 19, n, "porch's FunctionConfigs")
}
