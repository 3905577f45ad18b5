package setannotations_test

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

// TestRunV014 holds RunV014 to what set-annotations v0.1.4 does where it
// differs from the catalog's later function (read at tag
// go/set-annotations/v0.1.4: main.go and annotations_transformer.go, on
// kustomize api v0.8.11 and kyaml v0.10.21's framework).
func TestRunV014(t *testing.T) {
	// earlier is a result of an earlier function in the pipeline.
	earlier := &fn.Result{Message: "from an earlier function", Severity: fn.Info}
	tests := []struct {
		name   string
		config string
		items  string
		wantOK bool
		// want are the items after the run; nil: unchanged.
		want []string
		// wantResults are the run's results; the run starts with earlier.
		wantResults fn.Results
	}{{
		name:        "success reports nothing and keeps the results it came with",
		config:      configMapConfig,
		items:       configMapItem,
		wantOK:      true,
		want:        []string{annotatedConfigMapItem},
		wantResults: fn.Results{earlier},
	}, {
		name:   "an item without a name or a kind is annotated",
		config: configMapConfig,
		items:  "apiVersion: kustomize.config.k8s.io/v1beta1\nresources:\n- cm.yaml\n",
		wantOK: true,
		want: []string{"apiVersion: kustomize.config.k8s.io/v1beta1\nresources:\n- cm.yaml\n" +
			"metadata:\n  annotations:\n    color: orange\n    fruit: apple\n"},
		wantResults: fn.Results{earlier},
	}, {
		name:        "a bad config's result replaces the results",
		config:      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: my-config\n",
		items:       configMapItem,
		wantResults: fn.Results{failure("failed to configure function: input annotation list cannot be empty")},
	}, {
		name:   "a repeated id, as kyaml v0.10 wrote ids, and no items",
		config: configMapConfig,
		items:  configMapItem + "---\n" + configMapItem,
		want:   []string{},
		wantResults: fn.Results{failure(
			"failed to run function: may not add resource with an already registered id: ~G_v1_ConfigMap|~X|the-map")},
	}, {
		name:   "two nameless items of one kind are one id",
		config: configMapConfig,
		items:  "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: ConfigMap\n",
		want:   []string{},
		wantResults: fn.Results{failure(
			"failed to run function: may not add resource with an already registered id: ~G_v1_ConfigMap|~X|~N")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := fn.ParseKubeObject([]byte(tt.config))
			require.NoError(t, err)
			rl := &fn.ResourceList{FunctionConfig: c, Items: parse(t, tt.items), Results: fn.Results{earlier}}
			ok, err := setannotations.RunV014(rl)
			assert.Equal(t, tt.wantOK, ok)
			if tt.wantOK {
				require.NoError(t, err)
			} else {
				// v0.1.4's log is its one error result.
				require.Len(t, tt.wantResults, 1)
				assert.Equal(t, "[error] : "+tt.wantResults[0].Message, exitlog.Of(err))
			}
			want := tt.want
			if want == nil {
				want = reformat(t, tt.items)
			}
			out := []string{}
			for _, o := range rl.Items {
				out = append(out, o.String())
			}
			assert.Equal(t, want, out)
			assert.Equal(t, tt.wantResults, rl.Results)
		})
	}
}
