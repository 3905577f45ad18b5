package kptrender_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
)

// TestAttribution: a render stamps Config Connector resources with the
// values kpt's recordAction gives for its fn group, and nothing else;
// NoAttribution leaves them as they were.
func TestAttribution(t *testing.T) {
	const annotation = "cnrm.cloud.google.com/blueprint"
	cases := map[string]string{
		"":                         "krm-fn",
		"krm-fn":                   "krm-fn",
		"krm-pkg":                  "krm-pkg-fn",
		"krm-live":                 "krm-fn-live",
		"krm-pkg-live":             "krm-pkg-fn-live",
		"cnrm/landing-zone:v0.4.0": "cnrm/landing-zone:v0.4.0,krm-fn",
		"cnrm/landing-zone:networking/v0.4.0,krm-pkg,blueprints_controller": "cnrm/landing-zone:networking/v0.4.0,krm-pkg-fn,blueprints_controller",
		"krm-pkg,krm-live": "krm-pkg-fn,krm-pkg-fn-fn-live",
	}
	for _, off := range []bool{false, true} {
		dir := t.TempDir()
		files := map[string]string{
			"Kptfile":    kptfile("p", "    - image: echo\n"),
			"plain.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n",
		}
		i := 0
		for cur := range cases {
			meta := "  name: b" + string(rune('a'+i)) + "\n"
			if cur != "" {
				meta += "  annotations:\n    " + annotation + ": \"" + cur + "\"\n"
			}
			files[filepath.Join("buckets", string(rune('a'+i))+".yaml")] = "apiVersion: storage.cnrm.cloud.google.com/v1beta1\nkind: StorageBucket\nmetadata:\n" + meta
			i++
		}
		writePackage(t, dir, files)
		_, err := kptrender.Render(context.Background(), dir, &recorder{}, kptrender.Options{NoAttribution: off})
		require.NoError(t, err)

		plain, err := os.ReadFile(filepath.Join(dir, "plain.yaml"))
		require.NoError(t, err)
		assert.NotContains(t, string(plain), annotation, "not a Config Connector resource")
		for j := 0; j < i; j++ {
			p := filepath.Join("buckets", string(rune('a'+j))+".yaml")
			before, err := yaml.Parse(files[p])
			require.NoError(t, err)
			after, err := yaml.ReadFile(filepath.Join(dir, p))
			require.NoError(t, err)
			cur := before.GetAnnotations()[annotation]
			want := cases[cur]
			if off {
				want = cur
			}
			assert.Equal(t, want, after.GetAnnotations()[annotation], "blueprint annotation %q, NoAttribution %v", cur, off)
		}
	}
}
