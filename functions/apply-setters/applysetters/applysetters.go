// Package applysetters is the catalog's apply-setters v0.2.2 on the
// current krm-functions-sdk: the catalog's applysetters package behind the
// results its own main reports.
package applysetters

import (
	"fmt"

	setters "github.com/kptdev/krm-functions-catalog/functions/go/apply-setters/applysetters"
	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Run is apply-setters v0.2.2 on the current krm-functions-sdk. The
// catalog's own main for v0.2.2 is written against kyaml v0.10's framework
// and no longer compiles with the kyaml the other functions need; its
// applysetters package does, and this reproduces what that main reports:
// one result per field set, "no matches for input setter(s)" when nothing
// matched, and an error result on failure.
func Run(rl *fn.ResourceList) (bool, error) {
	fail := func(err error) (bool, error) {
		rl.Results = append(rl.Results, &fn.Result{
			Message:  fmt.Sprintf("failed to apply setters: %v", err),
			Severity: fn.Error,
		})
		return false, nil
	}
	nodes := make([]*yaml.RNode, 0, len(rl.Items))
	for _, o := range rl.Items {
		n, err := yaml.Parse(o.String())
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}
	var config *yaml.RNode
	if rl.FunctionConfig != nil {
		n, err := yaml.Parse(rl.FunctionConfig.String())
		if err != nil {
			return fail(err)
		}
		config = n
	}
	var s setters.ApplySetters
	setters.Decode(config, &s)
	out, err := s.Filter(nodes)
	if err != nil {
		return fail(err)
	}
	items := make(fn.KubeObjects, 0, len(out))
	for _, n := range out {
		o, err := fn.ParseKubeObject([]byte(n.MustString()))
		if err != nil {
			return fail(err)
		}
		items = append(items, o)
	}
	rl.Items = items
	if len(s.Results) == 0 {
		rl.Results = append(rl.Results, &fn.Result{Message: "no matches for input setter(s)"})
		return true, nil
	}
	for _, r := range s.Results {
		rl.Results = append(rl.Results, &fn.Result{
			Message: fmt.Sprintf("set field value to %q", r.Value),
			Field:   &fn.Field{Path: r.FieldPath},
			File:    &fn.File{Path: r.FilePath},
		})
	}
	return true, nil
}
