package kptrender_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/kptrender"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// labeller labels every resource it gets, deletes the one named "doomed"
// and adds a ConfigMap "added"; it records the names it was given.
type labeller struct{ got []string }

func (l *labeller) EvaluateFunction(_ context.Context, in *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	r := &kio.ByteReader{Reader: bytes.NewReader(in.GetResourceList()), PreserveSeqIndent: true}
	items, err := r.Read()
	if err != nil {
		return nil, err
	}
	var out []*yaml.RNode
	for _, it := range items {
		l.got = append(l.got, it.GetName())
		if it.GetName() == "doomed" {
			continue
		}
		if err := it.PipeE(yaml.SetLabel("touched", "yes")); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	added, err := yaml.Parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: added\n  annotations:\n    config.kubernetes.io/path: added.yaml\n")
	if err != nil {
		return nil, err
	}
	out = append(out, added)
	rl, err := kptrender.BuildResourceList(out, nil)
	if err != nil {
		return nil, err
	}
	return &pb.EvaluateFunctionResponse{ResourceList: rl}, nil
}

func TestSelectorsAndExclude(t *testing.T) {
	for _, c := range []struct {
		name      string
		selection string
		given     []string
		labelled  []string
	}{
		{"kind selector", "selectors:\n        - kind: ConfigMap", []string{"a", "doomed"}, []string{"a"}},
		{"two selectors, either matches", "selectors:\n        - name: a\n        - labels: {tier: web}", []string{"a", "d"}, []string{"a", "d"}},
		{"every field of a selector must match", "selectors:\n        - kind: ConfigMap\n          name: d", nil, nil},
		{"exclude", "exclude:\n        - kind: ConfigMap", []string{"d"}, []string{"d"}},
		{"selectors then exclude", "selectors:\n        - kind: ConfigMap\n      exclude:\n        - name: doomed", []string{"a"}, []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			kptfile := "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: p\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  mutators:\n    - image: labeller\n      " + c.selection + "\n"
			resources := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: doomed\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  labels:\n    tier: web\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "Kptfile"), []byte(kptfile), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "resources.yaml"), []byte(resources), 0o644))
			fn := &labeller{}
			list, err := kptrender.Render(context.Background(), dir, fn, kptrender.Options{})
			require.NoError(t, err)
			require.Zero(t, list.ExitCode)
			// The Kptfile is local config; kpt gives it to functions
			// only when selected too.
			var given []string
			for _, n := range fn.got {
				if n != "p" {
					given = append(given, n)
				}
			}
			assert.Equal(t, c.given, given, "resources the function got")

			r := &kio.LocalPackageReader{PackagePath: dir}
			items, err := r.Read()
			require.NoError(t, err)
			var names, labelled []string
			for _, it := range items {
				assert.NotContains(t, it.GetAnnotations(), "internal.config.k8s.io/kpt-resource-id")
				names = append(names, it.GetName())
				if it.GetLabels()["touched"] == "yes" {
					labelled = append(labelled, it.GetName())
				}
			}
			assert.Equal(t, c.labelled, labelled, "resources changed")
			want := []string{"a", "doomed", "d", "added"}
			if contains(c.given, "doomed") {
				want = []string{"a", "d", "added"}
			}
			assert.ElementsMatch(t, want, names, "unselected resources stay, deleted ones go, new ones are added")
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
