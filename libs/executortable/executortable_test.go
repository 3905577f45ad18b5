package executortable

import (
	"strings"
	"testing"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestBuildAndLookup(t *testing.T) {
	s := &configpb.Snapshot{Version: 3, Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace", Prefixes: []string{""},
			Go:     &configpb.GoExecutor{Tags: []string{"v0.4.5"}, Id: "set-namespace"},
			Binary: &configpb.BinaryExecutor{Tags: []string{"~0.4"}, Path: "set-namespace"},
			Pod:    &configpb.PodExecutor{}},
		{Namespace: "ns", Name: "dup", Image: "set-namespace", Go: &configpb.GoExecutor{Tags: []string{"v0.4.5"}, Id: "x"}},
		{Namespace: "ns", Name: "bad", Image: "starlark", Binary: &configpb.BinaryExecutor{Tags: []string{"~~"}, Path: "s"}},
	}}
	tables := Build(s)
	ref, err := imagematch.Parse("set-namespace:v0.4.5", "")
	if err != nil {
		t.Fatal(err)
	}
	if fc, ok := tables.Lookup(Go, ref); ok {
		t.Errorf("conflicting go claim resolved to %s", Owner(fc))
	}
	if fc, ok := tables.Lookup(Binary, ref); !ok || fc.GetBinary().GetPath() != "set-namespace" {
		t.Errorf("binary lookup = %v, %v", fc, ok)
	}
	if fc, ok := tables.Lookup(Pod, ref); !ok || Owner(fc) != "ns/sn" {
		t.Errorf("pod lookup = %v, %v", fc, ok)
	}
	if got := tables.ConflictsOf("ns/dup"); len(got) != 1 || !strings.Contains(got[0], "go executor") || !strings.Contains(got[0], "ns/sn") {
		t.Errorf("ConflictsOf(ns/dup) = %v", got)
	}
	if tables.Invalid["ns/bad"] == nil {
		t.Errorf("invalid = %v", tables.Invalid)
	}
}
