package porchconfig_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tools/fnctl/porchconfig"
)

// porchFiles are porch v1.5.8's own runner configuration, from its module
// (@porch): the --config its image ships (func/config.yaml) and the
// --pod-cache-config ConfigMap of its runner Deployment.
func porchFiles(t *testing.T) (porchconfig.ExecConfig, []porchconfig.PodCacheEntry) {
	t.Helper()
	data, err := os.ReadFile(harness.Binary(t, "FNRUNNER_PORCH_EXEC_CONFIG"))
	require.NoError(t, err)
	exec, err := porchconfig.ParseExec(data)
	require.NoError(t, err)
	require.NotEmpty(t, exec.Functions)

	data, err = os.ReadFile(harness.Binary(t, "FNRUNNER_PORCH_RUNNER_DEPLOYMENT"))
	require.NoError(t, err)
	var podCache string
	for _, doc := range splitYAML(data) {
		var cm struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
		}
		require.NoError(t, yaml.Unmarshal(doc, &cm))
		if cm.Kind == "ConfigMap" && cm.Metadata.Name == "pod-cache-config" {
			podCache = cm.Data["pod-cache-config.yaml"]
		}
	}
	require.NotEmpty(t, podCache, "porch's runner Deployment has no pod-cache-config ConfigMap")
	pods, err := porchconfig.ParsePodCache([]byte(podCache))
	require.NoError(t, err)
	require.NotEmpty(t, pods)
	return exec, pods
}

// TestPorchsOwnFilesConvert converts porch's own files and looks every
// image they name up in fnrunner's image matcher (the table the executors
// are chosen by), built from the output: each exec image reaches its
// binary, each pod-cache image a pod executor with its TTL and limits.
func TestPorchsOwnFilesConvert(t *testing.T) {
	exec, pods := porchFiles(t)
	fcs, err := porchconfig.Convert(exec, pods, porchconfig.Options{Namespace: "porch-fn-system"})
	require.NoError(t, err)

	var binClaims []imagematch.Claim[string]
	var podClaims []imagematch.Claim[*v1alpha1.PodExecutorConfig]
	names := map[string]bool{}
	for _, fc := range fcs {
		assert.False(t, names[fc.Name], "two FunctionConfigs named %s", fc.Name)
		names[fc.Name] = true
		assert.Equal(t, "porch-fn-system", fc.Namespace)
		if b := fc.Spec.BinaryExecutor; b != nil {
			binClaims = append(binClaims, imagematch.Claim[string]{Owner: fc.Name, Name: fc.Spec.Image, Prefixes: fc.Spec.Prefixes, Tags: b.Tags, Value: b.Path})
		}
		if p := fc.Spec.PodExecutor; p != nil {
			podClaims = append(podClaims, imagematch.Claim[*v1alpha1.PodExecutorConfig]{Owner: fc.Name, Name: fc.Spec.Image, Prefixes: fc.Spec.Prefixes, Tags: p.Tags, Value: p})
		}
	}
	bins, conflicts, invalid := imagematch.NewTable("", binClaims)
	require.Empty(t, conflicts)
	require.Empty(t, invalid)
	podTable, conflicts, invalid := imagematch.NewTable("", podClaims)
	require.Empty(t, conflicts)
	require.Empty(t, invalid)

	images := 0
	for _, f := range exec.Functions {
		for _, image := range f.Images {
			ref, err := imagematch.Parse(image, "")
			require.NoError(t, err)
			path, ok := bins.Lookup(ref)
			if assert.True(t, ok, "%s is claimed by no binary", image) {
				assert.Equal(t, f.Function, path, image)
			}
			images++
		}
	}
	for _, e := range pods {
		ref, err := imagematch.Parse(e.Name, "")
		require.NoError(t, err)
		pod, ok := podTable.Lookup(ref)
		if !assert.True(t, ok, "%s has no pod executor", e.Name) {
			continue
		}
		ttl, err := time.ParseDuration(e.TimeToLive)
		require.NoError(t, err)
		assert.Equal(t, ttl, pod.TimeToLive.Duration, e.Name)
		assert.Equal(t, e.MaxParallelPodsPerFunction, pod.MaxParallelExecutions, e.Name)
		assert.Equal(t, e.MaxWaitlistLength, pod.PreferredMaxQueueLength, e.Name)
	}
	t.Logf("porch v1.5.8: %d exec images of %d binaries and %d warm pods → %d FunctionConfigs", images, len(exec.Functions), len(pods), len(fcs))

	// The output reads back as FunctionConfigs.
	out, err := porchconfig.Write(fcs)
	require.NoError(t, err)
	docs := splitYAML(out)
	require.Len(t, docs, len(fcs))
	var back v1alpha1.FunctionConfig
	require.NoError(t, yaml.UnmarshalStrict(docs[0], &back))
	assert.Equal(t, fcs[0].Spec, back.Spec)
}

func TestConvert(t *testing.T) {
	const catalog = "ghcr.io/kptdev/krm-functions-catalog"
	for _, tc := range []struct {
		name      string
		exec      string
		pods      string
		want      map[string]v1alpha1.FunctionConfigSpec
		wantError string
	}{{
		name: "two binaries for one image name get one FunctionConfig each",
		exec: "functions:\n- function: apply-setters\n  images: [" + catalog + "/apply-setters:v0.2.0]\n- function: apply-setters-v1\n  images: [" + catalog + "/apply-setters:v0.1.1]\n",
		want: map[string]v1alpha1.FunctionConfigSpec{
			"apply-setters-apply-setters":    {Image: "apply-setters", Prefixes: []string{catalog}, BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v0.2.0"}, Path: "apply-setters"}},
			"apply-setters-apply-setters-v1": {Image: "apply-setters", Prefixes: []string{catalog}, BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v0.1.1"}, Path: "apply-setters-v1"}},
		},
	}, {
		name: "a digest is claimed as a digest; a pod entry joins its binary",
		exec: "functions:\n- function: set-image\n  images: [" + catalog + "/set-image@sha256:3f488461ec89741aa4a693cbde683d6abe8e1427e2dec25bb99c5ddf81e39339, " + catalog + "/set-image:v0.1.2]\n",
		pods: "- name: " + catalog + "/set-image:v0.1.1\n  timeToLive: 10m\n",
		want: map[string]v1alpha1.FunctionConfigSpec{
			"set-image": {Image: "set-image", Prefixes: []string{catalog},
				BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"sha256:3f488461ec89741aa4a693cbde683d6abe8e1427e2dec25bb99c5ddf81e39339", "v0.1.2"}, Path: "set-image"},
				PodExecutor:    &v1alpha1.PodExecutorConfig{Tags: []string{"v0.1.1"}, TimeToLive: metav1Duration(10 * time.Minute)}},
		},
	}, {
		name: "pod entries without a TTL get porch's --pod-ttl; one per entry, for one warm pod each",
		pods: "- name: set-labels:v0.1.5\n- name: set-labels:v0.2.0\n  maxParallelPodsPerFunction: 3\n",
		want: map[string]v1alpha1.FunctionConfigSpec{
			"set-labels-pod-v0-1-5": {Image: "set-labels", Prefixes: []string{catalog}, PodExecutor: &v1alpha1.PodExecutorConfig{Tags: []string{"v0.1.5"}, TimeToLive: metav1Duration(30 * time.Minute)}},
			"set-labels-pod-v0-2-0": {Image: "set-labels", Prefixes: []string{catalog}, PodExecutor: &v1alpha1.PodExecutorConfig{Tags: []string{"v0.2.0"}, TimeToLive: metav1Duration(30 * time.Minute), MaxParallelExecutions: 3}},
		},
	},
		{name: "a misspelt field", exec: "functions:\n- function: x\n  image: [a:v1]\n", wantError: "unknown field"},
		{name: "no images", exec: "functions:\n- function: x\n", wantError: "at least one image"},
		{name: "one image, two binaries", exec: "functions:\n- function: a\n  images: [x:v1]\n- function: b\n  images: [x:v1]\n", wantError: "listed for a and for b"},
		{name: "a bad image", exec: "functions:\n- function: a\n  images: [\"x y\"]\n", wantError: "white space"},
		{name: "a bad TTL", pods: "- name: x:v1\n  timeToLive: forever\n", wantError: "not a positive duration"},
		{name: "a pod entry without an image", pods: "- timeToLive: 1m\n", wantError: "no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec, err := porchconfig.ParseExec([]byte(tc.exec))
			var pods []porchconfig.PodCacheEntry
			if err == nil {
				pods, err = porchconfig.ParsePodCache([]byte(tc.pods))
			}
			var fcs []v1alpha1.FunctionConfig
			if err == nil {
				fcs, err = porchconfig.Convert(exec, pods, porchconfig.Options{Namespace: "ns"})
			}
			if tc.wantError != "" {
				require.ErrorIs(t, err, porchconfig.ErrInvalid)
				assert.Contains(t, err.Error(), tc.wantError)
				return
			}
			require.NoError(t, err)
			got := map[string]v1alpha1.FunctionConfigSpec{}
			for _, fc := range fcs {
				got[fc.Name] = fc.Spec
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func metav1Duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// splitYAML splits a YAML stream at its document separators.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, doc := range strings.Split("\n"+string(data), "\n---") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}
