package resourcelist

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
)

const valid = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: a
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    namespace: prod
results:
- message: set namespace
  severity: info
- message: "bad field"
  severity: error
  resourceRef:
    apiVersion: v1
    kind: ConfigMap
    name: a
`

func TestParse(t *testing.T) {
	rl, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.Items) != 1 || rl.Items[0].GetName() != "a" {
		t.Errorf("items = %v", rl.Items)
	}
	if rl.FunctionConfig == nil || rl.FunctionConfig.GetName() != "function-input" {
		t.Errorf("functionConfig = %v", rl.FunctionConfig)
	}
	if len(rl.Results) != 2 || rl.Results[1].Severity != framework.Error {
		t.Fatalf("results = %+v", rl.Results)
	}
	if got := ErrorSummary(rl.Results); !strings.Contains(got, "bad field") || strings.Contains(got, "set namespace") {
		t.Errorf("ErrorSummary = %q", got)
	}
}

func TestParseEmptyLists(t *testing.T) {
	for _, in := range []string{
		"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n",
		"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
		"apiVersion: config.kubernetes.io/v1alpha1\nkind: ResourceList\nitems:\n",
	} {
		rl, err := Parse([]byte(in))
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		if len(rl.Items) != 0 || rl.FunctionConfig != nil || rl.Results != nil {
			t.Errorf("Parse(%q) = %+v", in, rl)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "",
		"blank":          "  \n\t",
		"not yaml":       "{{{ not: [yaml",
		"scalar":         "just a string",
		"list":           "- a\n- b\n",
		"other kind":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
		"bad apiVersion": "apiVersion: v1\nkind: ResourceList\n",
		"items not list": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: {a: b}\n",
		"item scalar":    "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [3]\n",
		"results scalar": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nresults: 7\n",
	} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse error = %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"))
	f.Add([]byte("kind: ResourceList\nitems: [[]]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rl, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if rl.Node == nil {
			t.Fatal("nil node for a valid ResourceList")
		}
		_ = ErrorSummary(rl.Results)
	})
}
